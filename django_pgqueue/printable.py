"""Text for a terminal or a log: control characters escaped.

A queue name, a job name, a worker id or an error message comes from a row anybody could have
written. Printed raw, ``\\x1b[2J`` clears the screen, ``\\r`` and ``\\n`` forge a line of a
table or a log, and a bidirectional override reverses what follows. Everything that prints such
values goes through :func:`printable` (``pgqueue_status``, ``pgqueue_bench``),
:func:`printable_json` (their ``--json``) or, for log records, :class:`PrintableFilter`.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime
from typing import Any

from django.utils import timezone

#: C0 and C1 control characters, DEL, and the characters that move text around: the line and
#: paragraph separators and the bidirectional marks, embeddings, overrides and isolates.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character written as an escape (``\\x1b``, ``\\n``...).

    ``keep_newlines`` keeps the line breaks of a multi-line text (a traceback) as they are.
    """
    if keep_newlines:
        return "\n".join(_UNPRINTABLE.sub(_escape, line) for line in text.split("\n"))
    return _UNPRINTABLE.sub(_escape, text)


def printable_json(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` with every control character escaped (it leaves DEL, U+007F, raw)."""
    return json.dumps(value, ensure_ascii=True, **kwargs).replace("\x7f", "\\u007f")


def log_time(value: datetime) -> str:
    """A time as every log message of the package prints it: ``2026-11-23 15:03:18.410+01:00``.

    In Django's current time zone (``TIME_ZONE`` unless a project activated another), as the
    ``run_jobs`` line times are, with its UTC offset, to the millisecond. A naive value
    (``USE_TZ = False``) is read as in that zone.
    """
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return timezone.localtime(value).isoformat(sep=" ", timespec="milliseconds")


class PrintableFilter(logging.Filter):
    """Escapes the control characters of a record's message and traceback, in place.

    On every ``django_pgqueue`` logger (see :func:`get_logger`), so whatever handler and
    formatter a project configures prints no raw control character. A record with nothing to
    escape is left as it is (its ``msg`` template and ``args`` intact).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _UNPRINTABLE.search(message):
            record.msg, record.args = printable(message), None
        if record.exc_info and not record.exc_text:
            text = _FORMATTER.formatException(record.exc_info)
            if _UNPRINTABLE.search(text.replace("\n", "")):
                record.exc_text = printable(text, keep_newlines=True)
        return True


_FORMATTER = logging.Formatter()
_FILTER = PrintableFilter()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with :class:`PrintableFilter` on it (once)."""
    logger = logging.getLogger(name)  # noqa: TID251
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger
