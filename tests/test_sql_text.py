"""``django_pgqueue/sql/text/<module>.sql`` holds every statement of ``django_pgqueue.sql``
whole, as the module's constants build it now: one file per module, none for a module that is
gone (``make sql`` writes them again). No database."""

from __future__ import annotations

from scripts import sql_text


def test_every_statement_is_written_whole_as_the_modules_build_it():
    expected, written = sql_text.rendered(), sql_text.written()
    assert written == expected, (
        f"{sql_text.differences(written, expected)}\n"
        f"django_pgqueue/sql/text/ is out of date: {sql_text.REGENERATE}."
    )


def test_every_file_is_a_module_of_the_package():
    modules = {f"{sql_text.short_name(module)}.sql" for module in sql_text.modules()}
    stale = sorted(sql_text.written().keys() - modules)
    assert not stale, f"no module of django_pgqueue.sql for {stale}: {sql_text.REGENERATE}."


def test_a_file_differs_from_its_constants_in_whitespace_only():
    for module in sql_text.modules():
        path = sql_text.TEXT_DIR / f"{sql_text.short_name(module)}.sql"
        found = sql_text.parse(path.read_text())
        constants = sql_text.statements(module)
        names = [name for name, _ in constants]
        assert [name for name, _ in found] == names, f"{path.name}: {sql_text.REGENERATE}"
        for (name, text), (_, sql) in zip(found, constants, strict=True):
            same = text.split() == sql.split() and sql_text.literals(text) == sql_text.literals(sql)
            assert same, f"{path.name}, {name}: {sql_text.REGENERATE}"
    # The rule still finds the long statements (the claims, the held sweep).
    for name in ("claim", "limits", "held"):
        assert sql_text.parse((sql_text.TEXT_DIR / f"{name}.sql").read_text()), name
