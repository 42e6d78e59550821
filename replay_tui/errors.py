"""Errors that map onto the CLI's exit codes (2 bad input, 3 infrastructure; see
docs/architecture.md)."""

from __future__ import annotations


class ReplayTuiError(Exception):
    """Base error with an exit code and a hint that says what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class BadInput(ReplayTuiError):
    """The request or the manifest is invalid: exit 2."""

    exit_code = 2


class InfraError(ReplayTuiError):
    """The machine could not do it (no engine, image not pullable, data missing): exit 3."""

    exit_code = 3
