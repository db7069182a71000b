"""The one error type users see.

Library code raises `DlrigError` (or a subclass) with a message that names the input and what
is wrong, and a fix. Only `dlrig.cli.main` prints them and picks the exit code.
"""

from __future__ import annotations


class DlrigError(Exception):
    """A problem the user can act on: `message` says what is wrong, `fix` what to do."""

    exit_code = 1

    def __init__(self, message: str, fix: str | None = None, ref: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.ref = ref

    def one_line(self) -> str:
        """The message and the fix on one line, as the CLI prints it."""
        if self.fix:
            return f"{self.message} — fix: {self.fix}"
        return self.message


class InputError(DlrigError):
    """Bad usage or unreadable input: exit code 2."""

    exit_code = 2


class MissingExtraError(DlrigError):
    """An optional dependency is not installed; the fix names the extra."""

    exit_code = 2

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the Python package '{module}', which is not installed",
            fix=f"pip install 'dlrig[{extra}]'",
        )
