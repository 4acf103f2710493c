"""The data layer's errors: bad data (what went wrong, in which file, on which line), and an
object given as a table that is not one."""

from __future__ import annotations

from attnsvm.errors import ExpectedFailure


class DataFormatError(ExpectedFailure, ValueError):
    """Bad input data. ``path`` names the file (or archive member); ``line`` is 1-based or None."""

    def __init__(self, path: object, message: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")


class ChecksumError(DataFormatError):
    """A downloaded or local file whose digest differs from the registered one."""


class NotATable(ExpectedFailure, TypeError):
    """An object given as a table (a DataFrame) that is none of the accepted kinds, which the
    message lists."""
