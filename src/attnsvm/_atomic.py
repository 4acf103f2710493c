"""The package's one way to write a file: never seen half-written, shared like any other file.

Each writer goes to a hidden temporary file in the destination's folder (same file system, so the
final ``os.replace`` is atomic) and renames it over the destination only once it is complete; on
any error the temporary file is removed and the destination is untouched. ``mkstemp`` creates its
file 0600; the finished file gets the permissions a plain ``open`` would give (``0666`` less the
umask), so every file of a run directory or a dataset cache is readable by whoever may read the
folder (a run directory is meant to be shared).

A write that fails (a full disk: ``OSError(ENOSPC)``, which names no file) is re-raised naming
the destination, so the one line the user reads says which file could not be written. Libraries
that write from native code (safetensors, ``torch.save``, ``torch.jit``) report a full disk as
their own exception type, or abort the process; their output is built in memory and written
with ``write_bytes``, so a full disk is that ``OSError``. ``atomic_files`` writes several files
of one folder as one: none is renamed into place until all are complete.

``check_output`` refuses, before any work is done, an output path that could never be written: a
dangling symbolic link (a rename over it would fail only at the end of the run), a path under a
file, a folder that exists where a file is wanted or the other way round.

A writer killed before its rename (``kill -9``, a power cut) leaves its temporary file behind;
``remove_temporaries`` deletes those in a folder no writer is using (a run directory under its
lock), recognising them by the name ``atomic_path`` gives them.

A leaf module under ``attnsvm``: theory, rec and the lens all use it without importing each other.
"""

from __future__ import annotations

import errno
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from itertools import takewhile
from pathlib import Path
from typing import Any

# ".{name}.{8 characters of mkstemp}.tmp{suffix}", as atomic_path names its temporary files
_TEMPORARY = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp(\.[^.]+)?")


def _plain_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; it becomes ``path`` when the block ends.

    The temporary name keeps ``path``'s suffix, so writers that infer a format from it (numpy's
    ``savez`` adds ``.npz`` otherwise) write where they are told."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}"
    )
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        os.chmod(temporary, _plain_file_mode())
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        # a failed write names no file (ENOSPC), a failed rename our hidden one: name ``path``
        named = isinstance(error, OSError) and error.filename in (None, str(temporary))
        if named and error.errno is not None:
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise


@contextmanager
def atomic_files(folder: str | Path) -> Iterator[Callable[[str], Path]]:
    """Yield ``temporary(name)``, the temporary path of ``folder / name`` to write; every file
    asked for is renamed into place only when the block ends without error. On an error none
    is, and the folders the block created for them are removed again."""
    folder = Path(folder)
    missing = list(takewhile(lambda path: not path.exists(), (folder, *folder.parents)))
    try:
        with ExitStack() as files:
            yield lambda name: files.enter_context(atomic_path(folder / name))
    except BaseException:
        for path in missing:  # the deepest first
            with suppress(OSError):  # not empty: someone else writes there too
                path.rmdir()
        raise


def check_output(path: str | Path, *, folder: bool) -> Path:
    """``path``, where a folder (``folder``) or a file can be written, or an ``OSError``
    naming it: a dangling symbolic link, a file or folder of the wrong kind, a parent that is
    a file."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        target = os.readlink(path)
        raise FileExistsError(
            errno.EEXIST,
            f"is a dangling symbolic link (to {target}): remove it or choose another path",
            str(path),
        )
    if path.exists() and path.is_dir() != folder:
        kind = (errno.ENOTDIR, "Not a directory") if folder else (errno.EISDIR, "Is a directory")
        raise OSError(*kind, str(path))
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(parent))
    return path


def remove_temporaries(folder: str | Path) -> list[Path]:
    """Delete, anywhere under ``folder``, the temporary files of writers that never finished;
    returns them. Only for a folder no writer is using: a live writer's file would go too."""
    stale = [p for p in Path(folder).rglob(".*.tmp*") if _TEMPORARY.fullmatch(p.name)]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as temporary:
        temporary.write_bytes(data)


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as temporary:
        temporary.write_text(text)


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")
