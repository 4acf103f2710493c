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
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from attnsvm._files import open_regular, read_bytes
from attnsvm.errors import UnreadableFile, shown
from attnsvm.rec.data.catalog import DatasetSpec, SourceFile
from attnsvm.rec.data.errors import ChecksumError, DataFormatError
from attnsvm.rec.data.limits import DECOMPRESSED_BYTES


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
            try:
                data = read_bytes(self.path)  # a regular file only: never a blocking read
            except UnreadableFile as error:
                raise DataFormatError(self.path, error.problem) from None
        else:
            data = _read_member(self.path, self.member)
        return data, _verify(self.where, data, self.file.sha256 if verify else None)


def _read_member(path: Path, member: str) -> bytes:
    """An archive member's bytes, refused when encrypted or when it declares more than the cap
    on decompressed bytes (``limits.DECOMPRESSED_BYTES``: a zip bomb), before a byte is
    decompressed; the stream stops at the declared size and checks the CRC, so a member cannot
    expand beyond what its header says. A member that fails to decompress is named with its
    archive (``archive.zip:folder/u.data``)."""
    where = f"{path}:{member}"
    with _zip(path) as archive:
        info = archive.getinfo(member)
        if info.flag_bits & 0x1:
            raise DataFormatError(where, "is encrypted: extract it yourself")
        DECOMPRESSED_BYTES.check(where, info.file_size, "would expand to")
        try:
            with archive.open(info) as stream:
                return stream.read()
        except NotImplementedError as error:  # a compression method zipfile lacks
            raise DataFormatError(
                where, f"cannot be decompressed here ({error}): extract it with an unzip tool"
            ) from None
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as error:
            raise DataFormatError(
                where,
                f"is damaged inside the archive ({error}): the archive is corrupt or cut short; "
                "download or copy it again",
            ) from None


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
    """The archive open; any zip or I/O failure, listing or reading, as one DataFormatError
    saying what to do (a truncated member ends in EOFError, a corrupt one in zlib.error, an
    unknown compression method in NotImplementedError)."""
    try:
        with open_regular(path) as file:
            start = file.read(4)
            if not start.startswith(b"PK") and not zipfile.is_zipfile(file):  # no zip record
                what = "is empty" if not start else "is not a zip archive (it holds no zip record)"
                raise DataFormatError(
                    path, f"{what}: give the archive as published, or the data file itself"
                )
            file.seek(0)
            with zipfile.ZipFile(file) as archive:
                yield archive
    except UnreadableFile as error:
        raise DataFormatError(path, error.problem) from None
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError) as error:
        raise DataFormatError(
            path,
            f"is a damaged zip archive ({error}): it is corrupt or cut short; "
            "download or copy it again",
        ) from None


def _is_zip(path: Path) -> bool:
    """A zip by its name or its first bytes, so that a truncated one (which has lost the
    directory ``zipfile.is_zipfile`` looks for) is reported as a damaged archive."""
    if path.suffix.lower() == ".zip":
        return True
    try:
        with open_regular(path) as file:
            return file.read(4) == b"PK\x03\x04" or zipfile.is_zipfile(file)
    except UnreadableFile as error:
        raise DataFormatError(path, error.problem) from None


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
        # exists, not is_file: a directory or a named pipe of that name is reported as such
        if (root / candidate.name).exists():
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
    if _is_zip(source):
        with _zip(source) as archive:
            members = {Path(m).name: m for m in archive.namelist() if not m.endswith("/")}
        for candidate in dataset.files:
            if candidate.name in members:
                return RawFile(candidate, source, members[candidate.name])
        held = shown(", ".join(sorted(members.values()))) if members else "no file"
        raise DataFormatError(
            source,
            f"holds none of the {dataset.name} files ({names}); it holds {held}: give the "
            f"{dataset.name} archive as published, or one of its files itself",
        )
    for candidate in dataset.files:
        if source.name == candidate.name:
            return RawFile(candidate, source)
    raise DataFormatError(source, f"is not one of the {dataset.name} files ({names})")
