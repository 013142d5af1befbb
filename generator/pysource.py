"""Parsing Python source the generator wrote or read (one home for ``ast.parse``)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TypeVar

_MISMATCH = "AST constructor recursion depth mismatch"
T = TypeVar("T")


def _twice(call: Callable[[], T]) -> T:
    """Ask again when CPython < 3.11.8 / 3.12.1 raises its spurious ``SystemError: AST
    constructor recursion depth mismatch`` (CPython gh-106905: the depth counter is
    shared by threads, so another thread parsing at the same moment can trip it; the
    same source parses on the next call)."""
    try:
        return call()
    except SystemError as exc:
        if _MISMATCH not in str(exc):
            raise
        return call()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` of a module."""
    return _twice(lambda: ast.parse(source, filename))


def parse_expression(source: str) -> ast.Expression:
    """``ast.parse(source, mode="eval")``."""
    return _twice(lambda: ast.parse(source, mode="eval"))
