"""The package's one way to write a file: never seen half-written, shared like any other file.

Each writer goes to a hidden temporary file in the destination's folder (same file system, so the
final ``os.replace`` is atomic) and renames it over the destination only once it is complete; on
any error the temporary file is removed and the destination is untouched. ``mkstemp`` creates its
file 0600; the finished file gets the permissions a plain ``open`` would give (``0666`` less the
umask), so every file of a run directory or a dataset cache is readable by whoever may read the
folder (a run directory is meant to be shared).

A writer killed before its rename (``kill -9``, a power cut) leaves its temporary file behind;
``remove_temporaries`` deletes those in a folder no writer is using (a run directory under its
lock), recognising them by the name ``atomic_path`` gives them.

A leaf module under ``attnsvm``: theory, rec and the lens all use it without importing each other.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


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
