"""The lock that keeps two processes out of one run in progress.

``RunLock(folder)`` takes an exclusive ``flock`` on ``folder/.lock`` or refuses with
``RunInUse``, naming the process that holds it (its id and host, which the holder writes into
the file). The kernel drops a ``flock`` when its process ends, however it ends, so a run killed
with ``kill -9`` leaves no stale lock to clear by hand. ``holding_run_locks()`` releases every
lock taken inside it when it ends, so a run that fails in-process does not keep its folder
locked for the rest of the process.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from attnsvm.errors import ExpectedFailure

LOCK = ".lock"


class RunInUse(ExpectedFailure, ValueError):
    """Another process is working in this run directory."""


_HELD: ContextVar[list[RunLock] | None] = ContextVar("run locks held", default=None)


class RunLock:
    """An exclusive ``flock`` on a run's work folder, refused (naming the holder) while another
    process holds it. The kernel drops it when its process ends, however it ends, so a killed
    run leaves no stale lock. The lock file is not written through ``_atomic``: a lock lives on
    one inode, which a rename would replace."""

    def __init__(self, folder: Path) -> None:
        handle = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            os.close(handle)
            raise RunInUse(
                f"{folder}: another process is working in this run ({holder}); wait for it "
                "to end, or stop it, before resuming"
            ) from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"process {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._handle: int | None = handle
        held = _HELD.get()
        if held is not None:
            held.append(self)

    def release(self) -> None:
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None


@contextmanager
def holding_run_locks() -> Iterator[None]:
    """Run locks taken inside the block are released when it ends, however it ends (a run that
    fails in-process must not keep its folder locked for the rest of the process)."""
    token = _HELD.set([])
    try:
        yield
    finally:
        for lock in _HELD.get() or ():
            lock.release()
        _HELD.reset(token)
