"""Named datasets: download, prepare into the cache, and load.

A prepared dataset lives in the cache directory (``$ATTNSVM_DATA`` or ``~/.cache/attnsvm``) as
``<cache>/<name>/interactions.npz`` (the preprocessed table, no pickles) plus ``meta.json``.
``download`` fetches the registered URL, verifies its checksum and prepares from it;
``prepare`` does the same from a local file, folder or ``.zip``; ``prepare_table`` and
``prepare_frame`` store a table of the user's own (a file, a DataFrame) under a name, cleaned as
asked (``cleaning``), with its item titles where given (``titles``), and replace an existing one
only when forced; ``load_dataset`` reads the cache (or, with ``root``, a folder of raw files
such as ``../shared/data``). Every file is written to a temporary name and renamed into place,
and a table of one's own is written into a temporary folder that replaces the old one whole, so
an error never leaves a partial file nor a table beside another table's meta.json or titles.

What each dataset is lives in ``catalog``; finding and verifying its raw file in ``sources``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from attnsvm._atomic import atomic_files, atomic_path, write_json
from attnsvm._files import open_regular, read_json
from attnsvm.errors import InvalidRequest, UnreadableFile, shown
from attnsvm.rec.data import readers
from attnsvm.rec.data.catalog import DATASETS, DatasetSpec, spec
from attnsvm.rec.data.cleaning import Cleaning
from attnsvm.rec.data.errors import ChecksumError, DataFormatError
from attnsvm.rec.data.frames import frame_with_report
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.item_titles import TITLES_FILE, ItemTitles, match_catalogue
from attnsvm.rec.data.sources import RawFile, locate, locate_in_root
from attnsvm.rec.data.tables import TableLayout, read_with_report

# a name the user gives a table of their own: one folder of the cache, never a path
_OWN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def resolve_cache_dir(override: str | Path | None = None) -> Path:
    """``override``, else ``$ATTNSVM_DATA``, else ``~/.cache/attnsvm``."""
    if override is not None:
        return Path(override)
    env = os.environ.get("ATTNSVM_DATA")
    return Path(env) if env else Path.home() / ".cache" / "attnsvm"


def _read(dataset: DatasetSpec, raw: RawFile, *, verify: bool) -> tuple[Interactions, dict]:
    """Read, verify and preprocess the located ``raw`` file; also say what was read (for
    meta.json)."""
    data, sha256 = raw.read(verify=verify)
    table = dataset.preprocess(raw.file.reader(raw.where, data))
    return table, {
        "dataset": dataset.name,
        "file": raw.where,
        "sha256": sha256,
        "preprocessing": dataset.preprocessing,
    }


def read_raw(name: str, source: str | Path, *, verify: bool = True) -> tuple[Interactions, dict]:
    """Read and preprocess ``name`` from ``source``; also return what was read (for meta.json)."""
    dataset = spec(name)
    if dataset.generate is not None:
        raise DataFormatError(
            name,
            f"is generated, not read: use `attnsvm data download {name}` or load_dataset({name!r})",
        )
    return _read(dataset, locate(dataset, Path(source)), verify=verify)


def prepared_path(name: str, cache_dir: str | Path | None = None) -> Path:
    return resolve_cache_dir(cache_dir) / name / "interactions.npz"


def prepare(
    name: str, source_path: str | Path, cache_dir: str | Path | None = None, *, verify: bool = True
) -> Path:
    """Read ``name`` from a local copy, preprocess it and store it in the cache."""
    table, meta = read_raw(name, source_path, verify=verify)
    stats = table.stats(name)
    meta |= {"users": stats.users, "items": stats.items, "interactions": stats.interactions}
    return _store(prepared_path(name, cache_dir), table, meta)


def _store(target: Path, table: Interactions, meta: dict) -> Path:
    """``table`` as ``target`` and ``meta`` as the ``meta.json`` beside it: both or neither
    (the folder keeps anything else, such as the download the table was prepared from)."""
    with atomic_files(target.parent) as temporary:
        table.save(temporary(target.name), meta)
        temporary("meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return target


def prepare_table(
    name: str,
    source: str | Path,
    layout: TableLayout,
    cache_dir: str | Path | None = None,
    *,
    cleaning: Cleaning | None = None,
    titles: ItemTitles | None = None,
    force: bool = False,
) -> Path:
    """Read the user's own table ``source`` as ``layout`` says, clean it as ``cleaning`` says
    and store it in the cache as ``name`` (replacing an existing ``name`` only with ``force``),
    with ``titles`` (``titles.read_item_titles``) for its items; meta.json keeps what was read,
    dropped and cleaned and how many items have a title (``attnsvm data stats``)."""
    _check_own_name(name, cache_dir, force)
    table, report = read_with_report(source, layout, cleaning=cleaning)
    meta = {"file": str(Path(source).resolve()), "read": report}
    return _store_own(name, table, meta, cache_dir, titles)


def prepare_frame(
    name: str,
    frame: object,
    columns: str | Mapping[str, str | int],
    cache_dir: str | Path | None = None,
    *,
    cleaning: Cleaning | None = None,
    titles: ItemTitles | None = None,
    force: bool = False,
) -> Path:
    """Store a DataFrame as the dataset ``name``, as ``attnsvm data prepare`` stores a file:
    ``frame`` is a pandas DataFrame, a polars DataFrame or a pyarrow Table and ``columns`` its
    mapping (``{"user": "customer_id", "item": "sku", "time": "ts"}``, see
    ``frames.read_frame``), cleaned as ``cleaning`` says, with ``titles`` for its items
    (``titles.read_item_titles``, from a file or a DataFrame). Returns the stored
    ``<cache>/<name>/interactions.npz``; from then on ``load_dataset(name, cache_dir=…)``,
    ``load_dataset(<that path>)`` and a run config naming either read it without the frame.
    An existing ``name`` is replaced only with ``force``; ``attnsvm data stats NAME`` shows what
    was read, dropped and cleaned."""
    _check_own_name(name, cache_dir, force)
    table, report = frame_with_report(frame, columns, cleaning)
    return _store_own(name, table, {"frame": report["format"], "read": report}, cache_dir, titles)


def _check_own_name(name: str, cache_dir: str | Path | None, force: bool) -> None:
    """A name a table of one's own may be stored under, and not already taken unless forced."""
    if name in DATASETS:
        raise InvalidRequest(
            f"{name!r} is a registered dataset: give your own table another --name"
        )
    if _OWN_NAME.fullmatch(name) is None:
        raise InvalidRequest(
            f"dataset name {shown(name)} must be letters, digits, '.', '_' or '-' "
            "(it names a folder of the cache)"
        )
    folder = prepared_path(name, cache_dir).parent
    if not force and folder.exists():
        raise InvalidRequest(
            f"{name!r} is already prepared ({folder}): pass --force (force=True) to replace it, "
            "or choose another --name"
        )


def _store_own(
    name: str,
    table: Interactions,
    meta: dict,
    cache_dir: str | Path | None,
    titles: ItemTitles | None = None,
) -> Path:
    """``table``, the titles of its items and its meta.json as the cache's folder ``name``:
    written into a temporary folder beside it, which then takes the place of the old folder
    (if any) whole, so a name prepared again never keeps the titles of the one before."""
    if titles is not None:
        titles, coverage = match_catalogue(titles, table.item_ids)
        meta["read"]["titles"] = coverage  # shown by `attnsvm data prepare` and `data stats`
    stats = table.stats(name)
    meta = {"dataset": name} | meta
    meta |= {"users": stats.users, "items": stats.items, "interactions": stats.interactions}
    target = prepared_path(name, cache_dir)
    folder = target.parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{name}.", suffix=".tmp"))
    try:
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # as a plain mkdir makes it (mkdtemp's is private)
        table.save(staging / target.name, meta)
        if titles is not None:
            titles.save(staging / TITLES_FILE)
        write_json(staging / "meta.json", meta)
        if folder.exists():  # a directory is not renamed over another: move the old aside
            replaced = staging.with_suffix(".old")
            os.replace(folder, replaced)
            try:
                os.replace(staging, folder)
            except BaseException:
                os.replace(replaced, folder)
                raise
            shutil.rmtree(replaced)
        else:
            os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def read_report(name: str, cache_dir: str | Path | None = None) -> dict | None:
    """What was read for the prepared table ``name`` and what was dropped (None: a registered
    dataset's standard preparation, or no such table)."""
    report = _read_meta(prepared_path(name, cache_dir).with_name("meta.json")).get("read")
    return report if isinstance(report, dict) else None


def _expected_digest(checksum: str) -> tuple[str, str]:
    algorithm, _, value = checksum.partition(":")
    if algorithm not in ("md5", "sha256") or not value:
        raise ValueError(f"checksum must be 'md5:<hex>' or 'sha256:<hex>', not {checksum!r}")
    return algorithm, value.lower()


def fetch(url: str, target: Path, checksum: str | None, *, progress: bool = True) -> Path:
    """Stream ``url`` to ``target`` with a progress bar, verifying ``checksum`` on the fly."""
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    algorithm, expected = _expected_digest(checksum) if checksum else ("sha256", None)
    digest = hashlib.new(algorithm)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with (
            atomic_path(target) as temporary,
            temporary.open("wb") as out,
            urllib.request.urlopen(url, timeout=60) as response,
        ):
            total = int(response.headers.get("Content-Length") or 0) or None
            received = 0
            columns = (*Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn())
            with Progress(*columns, disable=not progress, transient=True) as bar:
                task = bar.add_task(f"downloading {target.name}", total=total)
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    digest.update(block)
                    received += len(block)
                    bar.update(task, advance=len(block))
            if total is not None and received != total:
                raise DataFormatError(
                    url,
                    f"download truncated: {received:,} of {total:,} bytes arrived "
                    "(nothing was kept; try again)",
                )
            if expected is not None and digest.hexdigest() != expected:
                raise ChecksumError(
                    url,
                    f"{algorithm} {digest.hexdigest()} differs from the published {expected}; "
                    "the download is damaged or the file changed upstream (nothing was kept)",
                )
    except (urllib.error.URLError, OSError) as error:
        if not isinstance(error, urllib.error.URLError) and error.filename is not None:
            raise  # the cache's own file (a full disk): not the network, said as it is
        reason = getattr(error, "reason", None) or error
        raise DataFormatError(
            url,
            f"download failed ({reason}): check the network and try again, or fetch the file "
            "another way and prepare it from there (attnsvm data prepare NAME --from FILE)",
        ) from None
    return target


def download(name: str, cache_dir: str | Path | None = None, *, progress: bool = True) -> Path:
    """Fetch ``name``'s official file into the cache, verify it, and prepare it (a built-in
    dataset is generated and stored instead)."""
    dataset = spec(name)
    if dataset.generate is not None:
        table = dataset.generate()
        meta = {"dataset": name, "generated": dataset.description}
        return _store(prepared_path(name, cache_dir), table, meta)
    if dataset.url is None:
        raise DataFormatError(
            name,
            f"has no public download URL; prepare it from a local copy "
            f"(attnsvm data prepare {name} --from PATH)",
        )
    raw = resolve_cache_dir(cache_dir) / name / Path(dataset.url).name
    if raw.exists() and not _matches(raw, dataset.checksum):
        raw.unlink()  # an older or foreign copy: fetched again rather than trusted
    if not raw.exists():
        fetch(dataset.url, raw, dataset.checksum, progress=progress)
    try:
        return prepare(name, raw, cache_dir)
    except DataFormatError as error:
        raw.unlink(missing_ok=True)  # a download that does not read as the dataset is not kept
        # named by where it came from: the copy the message would name is gone
        where = error.path.replace(str(raw), dataset.url, 1)
        raise type(error)(
            where, f"{error.message} (the download was not kept)", error.line
        ) from None


def _matches(path: Path, checksum: str | None) -> bool:
    """Whether ``path`` has the published digest (without one, the files read from it are
    checked against their own registered sha256 when it is prepared)."""
    if checksum is None:
        return True
    algorithm, expected = _expected_digest(checksum)
    digest = hashlib.new(algorithm)
    with open_regular(path) as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest() == expected


def keeps_times(
    name: str, root: str | Path | None = None, cache_dir: str | Path | None = None
) -> bool:
    """Whether ``load_dataset(name, root=root, cache_dir=cache_dir)`` gives event times, without
    reading the data.

    Decided by the raw file found under ``root``, or without ``root`` by the file the cached copy
    was prepared from (ML-1M's ``ratings.dat`` has times, its SASRec per-user file has not);
    where neither is found, only a dataset whose every accepted file has times counts as timed.
    """
    dataset = spec(name)
    if root is not None:
        try:
            return locate_in_root(dataset, Path(root)).file.timed
        except DataFormatError:
            pass  # nothing to read there: loading would fail; answer for the dataset itself
    else:
        meta = _read_meta(prepared_path(name, cache_dir).with_name("meta.json"))
        prepared_from = Path(str(meta.get("file", ""))).name
        for candidate in dataset.files:
            if candidate.name == prepared_from:
                return candidate.timed
    return bool(dataset.files) and all(f.timed for f in dataset.files)


def _read_meta(path: Path) -> dict:
    """A cache's ``meta.json``, or nothing where it is absent or damaged (it only informs)."""
    try:
        meta = read_json(path)
    except UnreadableFile:
        return {}
    return meta if isinstance(meta, dict) else {}


def load_dataset(
    name_or_path: str | Path,
    *,
    root: str | Path | None = None,
    cache_dir: str | Path | None = None,
    layout: TableLayout | None = None,
) -> Interactions:
    """A registered dataset (standard preprocessing applied), ``synthetic``, a table prepared
    under a name of its own (or the path of its ``interactions.npz``), or a file.

    With ``root`` the raw file is read from the dataset's folder under ``root`` (e.g.
    ``../shared/data/ml-1m``) or from ``root`` itself; without it, from the cache that
    ``prepare``/``download``/``prepare_table`` filled. A file is read as ``layout`` says, or
    without one with the reader its name or first line implies, as is.
    """
    name = str(name_or_path)
    path = Path(name_or_path)
    if layout is not None and not path.is_file():
        raise DataFormatError(
            name, "is not a file: a column mapping (data.columns) applies to a file only"
        )
    if name in DATASETS:
        dataset = DATASETS[name]
        if dataset.generate is not None:
            return dataset.generate()
        if root is not None:
            # located once: the file found is the one read and verified
            return _read(dataset, locate_in_root(dataset, Path(root)), verify=True)[0]
        cached = prepared_path(name, cache_dir)
        if not cached.exists():
            raise DataFormatError(
                cached,
                f"{name} is not prepared: run `attnsvm data prepare {name} --from PATH` "
                f"or `attnsvm data download {name}`",
            )
        return Interactions.load(cached)
    if layout is not None:
        return read_with_report(path, layout)[0]
    if path.suffix == ".npz" and path.is_file():  # a prepared table, e.g. one a run keeps
        return Interactions.load(path)
    if not path.exists():
        if _OWN_NAME.fullmatch(name) and prepared_path(name, cache_dir).exists():
            return Interactions.load(prepared_path(name, cache_dir))
        known = ", ".join(DATASETS)
        raise DataFormatError(
            path,
            f"is neither a file nor a registered dataset ({known}), nor a table prepared "
            "with `attnsvm data prepare --from FILE --columns ... --name NAME`",
        )
    return readers.read_auto(path)
