"""The commands' option types, from the ranges in :mod:`django_pgqueue.rules`.

``type=of(rule)`` turns a bad value (``--queue ''``, ``--threads 0``, ``--shutdown-timeout
nan``) into an argparse error: the usage, the option and the problem, exit status 2, before
the command does anything. Under ``call_command`` it is a :class:`CommandError`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from django_pgqueue import rules

_INTEGER = re.compile(r"\s*[-+]?[0-9]+\s*")


def of(rule: rules.Rule) -> Callable[[str], Any]:
    """An argparse ``type``: the text as the rule's kind of value, refused unless it passes."""

    def parse(text: str) -> Any:
        value = _convert(rule, text)
        problem = rule.problem(value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = type(rule).__name__.lower()  # argparse's fallback message names it
    return parse


def _convert(rule: rules.Rule, text: str) -> Any:
    if isinstance(rule, rules.Integer):
        if not _INTEGER.fullmatch(text):
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}")
        return int(text)
    if isinstance(rule, rules.Number):
        try:
            return float(text)
        except ValueError:
            kind = "a number of seconds" if rule.seconds else "a number"
            raise argparse.ArgumentTypeError(f"must be {kind}, got {text!r}") from None
    return text
