"""A disk that fills up: from the k-th write on, every write to a file opened for writing raises
``OSError(ENOSPC)`` with no file name, as a real full disk does, until space is freed.

``FullDisk.install(monkeypatch)`` routes ``open`` and ``io.open`` (what ``pathlib``, ``zipfile``
behind ``numpy.savez``, matplotlib and every Python writer open files with) through it; files
opened for reading pass through untouched. ``count`` says how many writes a command makes, so a
test can fill the disk at any of them.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
from typing import Any


class _Metered:
    """A file opened for writing, whose writes the disk may refuse."""

    def __init__(self, handle: Any, disk: FullDisk) -> None:
        self._handle, self._disk = handle, disk

    def write(self, data):
        self._disk.writes += 1
        if self._disk.fail_from is not None and self._disk.writes >= self._disk.fail_from:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._handle.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> _Metered:
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()


class FullDisk:
    def __init__(self) -> None:
        self.writes = 0  # writes since the last fill_from or count
        self.fail_from: int | None = None  # the first write refused; None: space left

    def install(self, monkeypatch) -> FullDisk:
        real_open = io.open

        def metered_open(file, mode="r", *args, **kwargs):
            handle = real_open(file, mode, *args, **kwargs)
            return _Metered(handle, self) if set(mode) & set("wax+") else handle

        monkeypatch.setattr(io, "open", metered_open)
        monkeypatch.setattr(builtins, "open", metered_open)
        return self

    def fill_from(self, write: int) -> None:
        """Refuse the ``write``-th write from now on, and every write after it."""
        self.writes, self.fail_from = 0, write

    def free(self) -> None:
        self.fail_from = None

    def count(self) -> None:
        """Count the writes from now on, refusing none."""
        self.writes, self.fail_from = 0, None
