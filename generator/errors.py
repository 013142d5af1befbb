"""The one error type the CLI turns into a located, one-line message.

Every module of the generator raises `AgentgenError` for bad input; the CLI prints
`str(err)` and exits with `err.exit_code`. Never put a secret in a message.
"""

from __future__ import annotations


class AgentgenError(Exception):
    """A user-facing error: where (source, line/col, JSON pointer) and what to do."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        pointer: str | None = None,
        line: int | None = None,
        col: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.pointer = pointer
        self.line = line
        self.col = col
        self.hint = hint

    def location(self) -> str:
        parts: list[str] = []
        if self.source:
            where = self.source
            if self.line is not None:
                where += f":{self.line}"
                if self.col is not None:
                    where += f":{self.col}"
            parts.append(where)
        if self.pointer is not None:
            parts.append(self.pointer or "/")
        return ": ".join(parts)

    def __str__(self) -> str:
        loc = self.location()
        text = f"{loc}: {self.message}" if loc else self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


class InvalidInput(AgentgenError):
    """A finding in the user's input (a manifest that does not parse or is invalid): exit 1,
    as `validate` exits for its findings; plain AgentgenError (2) is for usage and
    environment errors (a missing file, an unwritable directory)."""

    exit_code = 1
