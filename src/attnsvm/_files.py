"""Reading a file someone named: regular files only, never a blocking open, JSON of bounded depth.

A named pipe (FIFO) opened for reading waits for a writer, maybe for ever, and a device may never
end; a directory cannot be read as data. ``open_regular`` opens without blocking and refuses
anything but a regular file before a byte is read, so a data file, a config, a run file or a
titles file that is one of those fails at once with a message saying what it is. Every failure
is an ``UnreadableFile`` naming the path. ``read_json`` also turns what ``json`` raises on
malformed or pathologically nested text into one.

The counterpart of ``_atomic`` (the one way to write a file); a leaf module like it.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from attnsvm.errors import UnreadableFile

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` open for binary reading, or an ``UnreadableFile`` if it is not a regular file."""
    try:
        # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UnreadableFile(path, "no such file") from None
    except OSError as error:
        raise UnreadableFile(path, f"cannot be read ({error.strerror})") from None
    mode = os.fstat(handle).st_mode
    if not stat.S_ISREG(mode):
        os.close(handle)
        kind = _KINDS.get(stat.S_IFMT(mode), "not a file")
        raise UnreadableFile(path, f"is {kind}, not a regular file")
    os.set_blocking(handle, True)
    return os.fdopen(handle, "rb")


def require_regular(path: str | Path) -> Path:
    """``path``, checked to be a regular file, for libraries that open a path themselves."""
    open_regular(path).close()
    return Path(path)


def read_bytes(path: str | Path) -> bytes:
    with open_regular(path) as file:
        try:
            return file.read()
        except OSError as error:
            raise UnreadableFile(path, f"cannot be read ({error.strerror})") from None


def read_text(path: str | Path) -> str:
    """The file as strict UTF-8."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnreadableFile(path, f"is not UTF-8 text (byte {error.start:,})") from None


def read_json(path: str | Path) -> Any:
    """The file's JSON value; malformed, too deeply nested or oversized numbers are refused."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UnreadableFile(
            path, f"is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
        ) from None
    except RecursionError:
        raise UnreadableFile(path, "is not valid JSON here (nested too deeply)") from None
    except ValueError as error:  # an integer of more digits than Python converts
        raise UnreadableFile(path, f"is not valid JSON here ({error})") from None
