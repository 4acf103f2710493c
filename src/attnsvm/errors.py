"""Expected failures: what a user can fix, told in one line; everything else is a bug.

``ExpectedFailure`` marks an error whose message is the whole story: bad input data, a refused
setting, a missing or damaged file, a run directory in the wrong state, a diverged loss. Every
such error type in the package derives from it (``DataFormatError``, ``ConfigError``,
``RunDirError``, ``TrainingError``, ``LensError``, ``InvalidRequest``, ``UnreadableFile``, ...).
An ``OSError`` is expected too: it is the machine saying no (a missing file, a full disk, a
permission).

``expected_message(error)`` is the single decision every front end makes: the one-line message
of an expected failure, or ``None`` for anything else, which must surface with its traceback. The
CLI prints the line and exits 1 (``attnsvm.cli.boundary``); a server answers it as a client
error and logs anything else as a server error.

``shown(value)`` is how a message quotes what the user gave: ``repr`` (so markup, control
characters and blanks are visible and inert), cut to about 80 characters; ``cut(text)`` cuts
without quoting (ids, which read better bare).

A leaf module: the data layer, the trainer, the lens and every front end import it.
"""

from __future__ import annotations

import reprlib

SHOWN_LIMIT = 80  # characters of a user's input that a message quotes
MESSAGE_LIMIT = 1000  # characters of a whole message; only an unforeseen echo comes near it


class ExpectedFailure(Exception):
    """A failure the user can act on; its message names the file and line or the setting."""


class InvalidRequest(ExpectedFailure, ValueError):
    """A request that cannot be served as asked: an unknown user or item id, a k or a number of
    negatives out of range, a split or metric that does not exist."""


class UnknownName(ExpectedFailure, KeyError):
    """A name (a dataset, a per-user metric) that is not among the known ones, which the
    message lists."""

    def __str__(self) -> str:  # KeyError's own str() would quote the whole message
        return str(self.args[0])


class UnreadableFile(ExpectedFailure, ValueError):
    """A file that cannot be read as the package needs: missing, not a regular file, damaged."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def shown(value: object, limit: int = SHOWN_LIMIT) -> str:
    """``repr(value)`` cut in the middle to about ``limit`` characters, its full length said."""
    if isinstance(value, int) and value.bit_length() > 4 * limit:
        return f"an integer of {value.bit_length():,} bits"  # str() of it would be refused
    if not isinstance(value, str):  # containers: a bounded depth and length (no recursion)
        bounded = reprlib.Repr()
        bounded.maxlevel, bounded.maxstring, bounded.maxother = 3, limit, limit
        return bounded.repr(value)
    # a string's length is its own, not its repr's (the quotes and escapes)
    return cut(repr(value), limit, len(value) if isinstance(value, str) else None)


def cut(text: str, limit: int = SHOWN_LIMIT, length: int | None = None) -> str:
    """``text`` cut in the middle to about ``limit`` characters, its full ``length`` said."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}…{text[-half // 2 :]} ({length or len(text):,} characters)"


def _visible(character: str) -> str:
    if character == "\n":
        return " / "
    if character.isprintable():
        return character
    return character.encode("unicode_escape").decode("ascii")


def printable(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` on one line, control characters escaped (a file name with an escape sequence
    cannot repaint the terminal), cut to ``limit`` characters."""
    safe = "".join(map(_visible, text))
    if len(safe) > limit:
        safe = f"{safe[: limit - 40]}… (message cut: {len(safe):,} characters)"
    return safe


def expected_message(error: BaseException) -> str | None:
    """The one-line message of an expected failure; ``None`` for a bug (show its traceback)."""
    if isinstance(error, ExpectedFailure):
        return printable(str(error))
    if isinstance(error, OSError):
        # "path: No such file or directory", not "[Errno 2] No such file or directory: 'path'"
        reason = error.strerror or str(error)
        return printable(reason if error.filename is None else f"{error.filename}: {reason}")
    return None
