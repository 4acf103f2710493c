"""Registry: the staged real datasets give the published counts; prepare, cache and download
(against a local HTTP server) verify checksums and never leave partial files."""

import hashlib
import http.server
import threading
import zipfile
from functools import partial

import pytest

from attnsvm.rec.data import catalog, datasets
from attnsvm.rec.data.catalog import DatasetSpec, SourceFile
from attnsvm.rec.data.datasets import load_dataset
from attnsvm.rec.data.errors import ChecksumError, DataFormatError
from attnsvm.rec.data.readers import read_pairs


@pytest.mark.data
@pytest.mark.parametrize(
    ("name", "users", "items", "interactions"),
    [
        ("ml-1m", 6040, 3416, 999_611),  # SASRec/BERT4Rec version
        ("beauty", 22_363, 12_101, 198_502),
        ("sports", 35_598, 18_357, 296_337),
        ("lastfm", 1090, 3646, 52_551),
        ("ml-100k", 943, 1682, 100_000),
        ("ml-latest-small", 610, 9724, 100_836),
    ],
)
def test_staged_datasets_give_the_published_counts(shared_data, name, users, items, interactions):
    stats = load_dataset(name, root=shared_data).stats()
    assert (stats.users, stats.items, stats.interactions) == (users, items, interactions)


@pytest.mark.data
def test_ml1m_keeps_original_ids_and_order(shared_data):
    data = load_dataset("ml-1m", root=shared_data)
    first = data.item_ids[data.to_sequences().row(0)][:5].tolist()
    assert data.user_ids[0] == 1
    assert first == [3186, 1721, 1022, 1270, 2340]  # user 1's sequence (PROVENANCE.md)


@pytest.mark.data
def test_prepare_then_load_from_the_cache(shared_data, tmp_path):
    path = datasets.prepare("lastfm", shared_data / "lastfm", tmp_path)
    assert path == tmp_path / "lastfm" / "interactions.npz"
    assert sorted(p.name for p in path.parent.iterdir()) == ["interactions.npz", "meta.json"]
    cached = load_dataset("lastfm", cache_dir=tmp_path)
    direct = load_dataset("lastfm", root=shared_data)
    assert (cached.user == direct.user).all() and (cached.item == direct.item).all()


def test_unprepared_dataset_says_how_to_prepare(tmp_path):
    with pytest.raises(DataFormatError, match="attnsvm data prepare beauty --from PATH"):
        load_dataset("beauty", cache_dir=tmp_path)


def test_synthetic_is_registered_and_built_in(tmp_path):
    assert "synthetic" in catalog.DATASETS
    data = load_dataset("synthetic")
    assert (data.num_users, data.num_items, len(data)) == (2000, 300, 40_000)
    stored = datasets.download("synthetic", tmp_path, progress=False)
    assert load_dataset("synthetic", cache_dir=tmp_path).item.tolist() == data.item.tolist()
    assert stored.exists()


PAIRS = b"1 1\n1 2\n1 3\n2 1\n2 2\n2 3\n3 3\n3 1\n3 2\n"


@pytest.fixture
def toy_spec(monkeypatch):
    """Register a ``toy`` pairs dataset whose file is ``toy.txt`` with a known sha256."""

    def register(url=None, checksum=None, sha256=None):
        spec = DatasetSpec(
            name="toy",
            description="toy pairs",
            files=(SourceFile("toy.txt", read_pairs, sha256),),
            preprocess=lambda d: d.k_core(3, 3),
            preprocessing="3-core",
            url=url,
            checksum=checksum,
        )
        monkeypatch.setitem(catalog.DATASETS, "toy", spec)

    return register


def test_prepare_verifies_the_registered_sha256(tmp_path, toy_spec):
    raw = tmp_path / "toy.txt"
    raw.write_bytes(PAIRS)
    toy_spec(sha256="0" * 64)
    with pytest.raises(ChecksumError, match="differs from the registered"):
        datasets.prepare("toy", raw, tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.npz"))
    datasets.prepare("toy", raw, tmp_path / "cache", verify=False)
    toy_spec(sha256=hashlib.sha256(PAIRS).hexdigest())
    datasets.prepare("toy", tmp_path, tmp_path / "cache2")  # a folder holding the file
    assert len(load_dataset("toy", cache_dir=tmp_path / "cache2")) == 9


def test_prepare_reads_a_zip_archive(tmp_path, toy_spec):
    archive = tmp_path / "toy.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("toy/README", "not data")
        z.writestr("toy/toy.txt", PAIRS)
    toy_spec()
    datasets.prepare("toy", archive, tmp_path / "cache")
    assert load_dataset("toy", cache_dir=tmp_path / "cache").source.endswith("toy.zip:toy/toy.txt")


@pytest.fixture
def http_root(tmp_path):
    """A local HTTP server on 127.0.0.1 serving ``tmp_path/www``; yields (folder, base URL)."""
    www = tmp_path / "www"
    www.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield www, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_download_verifies_the_checksum_and_prepares(tmp_path, http_root, toy_spec):
    www, base = http_root
    with zipfile.ZipFile(www / "toy.zip", "w") as z:
        z.writestr("toy/toy.txt", PAIRS)
    md5 = hashlib.md5((www / "toy.zip").read_bytes()).hexdigest()
    toy_spec(url=f"{base}/toy.zip", checksum=f"md5:{md5}")
    path = datasets.download("toy", tmp_path / "cache", progress=False)
    assert len(load_dataset("toy", cache_dir=tmp_path / "cache")) == 9
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "interactions.npz",
        "meta.json",
        "toy.zip",
    ]


def test_download_with_a_bad_checksum_keeps_nothing(tmp_path, http_root, toy_spec):
    www, base = http_root
    (www / "toy.txt").write_bytes(PAIRS)
    toy_spec(url=f"{base}/toy.txt", checksum="sha256:" + "0" * 64)
    with pytest.raises(ChecksumError, match="differs from the published"):
        datasets.download("toy", tmp_path / "cache", progress=False)
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


def test_download_of_a_missing_file_is_a_clear_error(tmp_path, http_root, toy_spec):
    _, base = http_root
    toy_spec(url=f"{base}/absent.zip")
    with pytest.raises(DataFormatError, match="download failed"):
        datasets.download("toy", tmp_path / "cache", progress=False)
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


def test_unknown_name_lists_the_registry():
    with pytest.raises(KeyError, match="ml-1m"):
        catalog.spec("ml-2m")
    assert set(catalog.DATASETS) >= {
        "ml-1m",
        "ml-100k",
        "ml-latest-small",
        "beauty",
        "sports",
        "toys",
        "yelp",
        "lastfm",
        "steam",
        "ml-20m",
        "diginetica",
        "yoochoose",
        "synthetic",
    }


def test_keeps_times_follows_the_file_found_under_the_root(tmp_path):
    ratings = tmp_path / "with-times" / "ml-1m"
    ratings.mkdir(parents=True)
    rows = [f"{u}::{i}::5::{978300000 + 10 * u + i}" for u in range(1, 6) for i in range(1, 6)]
    (ratings / "ratings.dat").write_text("\n".join(rows) + "\n")  # survives the 5-core
    per_user = tmp_path / "per-user" / "ml-1m"
    per_user.mkdir(parents=True)
    (per_user / "ml-1m_seq_origids.txt").write_text("1 1 2 3\n")
    # ML-1M's ratings.dat has a time column, its SASRec per-user file only the order
    assert datasets.keeps_times("ml-1m", tmp_path / "with-times")
    assert not datasets.keeps_times("ml-1m", tmp_path / "per-user")
    assert load_dataset("ml-1m", root=tmp_path / "with-times").timestamp is not None
    # no file found: timed only if every accepted file is
    assert not datasets.keeps_times("ml-1m", tmp_path / "empty")
    assert datasets.keeps_times("ml-100k") and not datasets.keeps_times("beauty")
    with pytest.raises(KeyError, match="unknown dataset"):
        datasets.keeps_times("no-such-data")
    # the cache: what the prepared copy was read from
    cache = tmp_path / "cache"
    assert not datasets.keeps_times("ml-1m", cache_dir=cache)
    datasets.prepare("ml-1m", tmp_path / "with-times", cache)
    assert datasets.keeps_times("ml-1m", cache_dir=cache)


def test_a_root_never_lends_one_dataset_another_ones_file(tmp_path):
    # ml-latest-small and ML-20M both ship a ratings.csv: without an ml-20m folder, ML-20M
    # must not be read from ml-latest-small's
    other = tmp_path / "ml-latest-small"
    other.mkdir()
    rows = [f"{u},{i},4.0,{1000 + i}" for u in range(1, 6) for i in range(1, 21)]
    (other / "ratings.csv").write_text("userId,movieId,rating,timestamp\n" + "\n".join(rows))
    with pytest.raises(DataFormatError, match="no ml-20m folder"):
        load_dataset("ml-20m", root=tmp_path)
    assert load_dataset("ml-latest-small", root=tmp_path).user_ids.size == 5
    # the dataset's own file directly in the root is read
    (tmp_path / "ratings.csv").write_text((other / "ratings.csv").read_text())
    assert load_dataset("ml-20m", root=tmp_path).user_ids.size == 5


def test_prepare_from_a_folder_of_many_datasets_takes_only_this_ones(tmp_path):
    other = tmp_path / "raw" / "ml-latest-small"
    other.mkdir(parents=True)
    (other / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,1,4.0,1\n")
    with pytest.raises(DataFormatError, match="no ml-20m folder"):
        datasets.prepare("ml-20m", tmp_path / "raw", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
