"""Raw files: which of a dataset's accepted files a folder, file or ``.zip`` holds, and its bytes,
checked against the registered sha256.

Owns the lookup (``locate`` for what ``prepare`` is given, ``locate_in_root`` for a folder of
many datasets' raw data) and its answer, ``RawFile``. The caller passes that answer on to be
read, so a file is located once; locating reads no data (``keeps_times`` needs only which file
it is). Nothing here parses or writes.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from attnsvm.rec.data.catalog import DatasetSpec, SourceFile
from attnsvm.rec.data.errors import ChecksumError, DataFormatError


@dataclass(frozen=True)
class RawFile:
    """An accepted raw file, found: which one it is, and where (a file, or a zip member)."""

    file: SourceFile
    path: Path  # the file itself, or the zip archive that holds it
    member: str | None = None  # the archive member, where ``path`` is a zip

    @property
    def where(self) -> str:
        """The name that messages, ``Interactions.source`` and meta.json give it."""
        return str(self.path) if self.member is None else f"{self.path}:{self.member}"

    def read(self, *, verify: bool = True) -> tuple[bytes, str]:
        """The file's bytes and their sha256; with ``verify``, a ChecksumError where the
        registry pins another digest."""
        if self.member is None:
            data = self.path.read_bytes()
        else:
            with _zip(self.path) as archive:
                data = archive.read(self.member)
        return data, _verify(self.where, data, self.file.sha256 if verify else None)


def _verify(source: str, data: bytes, expected: str | None) -> str:
    """sha256 of ``data``; raises ChecksumError when it differs from ``expected``."""
    actual = hashlib.sha256(data).hexdigest()
    if expected is not None and actual != expected:
        raise ChecksumError(
            source,
            f"sha256 {actual} differs from the registered {expected} "
            "(a different version of the file; pass verify=False / --no-verify to accept it)",
        )
    return actual


@contextmanager
def _zip(path: Path) -> Iterator[zipfile.ZipFile]:
    """The archive open; any zip or I/O failure, listing or reading, as one DataFormatError."""
    try:
        with zipfile.ZipFile(path) as archive:
            yield archive
    except (zipfile.BadZipFile, OSError) as error:
        raise DataFormatError(path, f"is a damaged zip archive ({error})") from None


def _in_folder(dataset: DatasetSpec, folder: Path) -> RawFile | None:
    """The first accepted raw file anywhere inside ``folder``, in the order of preference."""
    for candidate in dataset.files:
        hits = sorted(folder.rglob(candidate.name))
        if hits:
            return RawFile(candidate, hits[0])
    return None


def locate_in_root(dataset: DatasetSpec, root: Path) -> RawFile:
    """The raw file read from a folder ``root``: one inside the dataset's own folder,
    else one directly in ``root``. Never a search through all of ``root``, where another
    dataset's folder may hold a file of the same name (ml-latest-small's ``ratings.csv`` is
    not ML-20M)."""
    for folder in dataset.folders:
        found = _in_folder(dataset, root / folder) if (root / folder).is_dir() else None
        if found is not None:
            return found
    for candidate in dataset.files:
        if (root / candidate.name).is_file():
            return RawFile(candidate, root / candidate.name)
    folders = ", ".join(f"{f}/" for f in dataset.folders)
    names = ", ".join(f.name for f in dataset.files)
    raise DataFormatError(
        root,
        f"has no {dataset.name} folder ({folders}) holding one of its files ({names}), "
        "nor such a file itself",
    )


def locate(dataset: DatasetSpec, source: Path) -> RawFile:
    """The accepted raw file that ``source`` is or holds (a file, a folder as in
    ``locate_in_root``, or a .zip)."""
    names = ", ".join(f.name for f in dataset.files)
    if source.is_dir():
        return locate_in_root(dataset, source)
    if not source.exists():
        raise DataFormatError(source, "no such file or folder")
    if zipfile.is_zipfile(source):
        with _zip(source) as archive:
            members = {Path(m).name: m for m in archive.namelist() if not m.endswith("/")}
        for candidate in dataset.files:
            if candidate.name in members:
                return RawFile(candidate, source, members[candidate.name])
        raise DataFormatError(source, f"holds none of the {dataset.name} files ({names})")
    for candidate in dataset.files:
        if source.name == candidate.name:
            return RawFile(candidate, source)
    raise DataFormatError(source, f"is not one of the {dataset.name} files ({names})")
