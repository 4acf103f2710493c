"""The malformed-file corpus: each file gives one DataFormatError naming the file and line,
never a library traceback, and preparing it leaves nothing in the cache."""

import pytest

from attnsvm.rec.data import catalog, datasets, readers
from attnsvm.rec.data.catalog import DatasetSpec, SourceFile
from attnsvm.rec.data.errors import DataFormatError


def table_reader(path, data=None):
    return readers.read_table(path, user="user", item="item", data=data)


def five_core_pairs(path, data=None):
    return readers.read_pairs(path, data).k_core(5, 5)


# (case, file name, reader, bytes, expected line or None, message fragment)
CORPUS = [
    ("empty", "q.txt", readers.read_per_user, b"", None, "is empty"),
    ("only whitespace", "p.txt", readers.read_pairs, b" \n\n\t\n", None, "is empty"),
    (
        "wrong separator",
        "ratings.dat",
        readers.read_movielens_dat,
        b"1,10,5,9\n",
        1,
        "expected 4 fields separated by '::', found 1",
    ),
    (
        "spaces not tabs",
        "u.data",
        readers.read_movielens_udata,
        b"1\t2\t3\t4\n1 2 3 4\n",
        2,
        "separated by '\\t'",
    ),
    (
        "non-integer user",
        "ratings.dat",
        readers.read_movielens_dat,
        b"1::10::5::9\nabc::10::5::9\n",
        2,
        "user id 'abc' is not an integer",
    ),
    (
        "fractional item id",
        "u.data",
        readers.read_movielens_udata,
        b"1\t2\t3\t4\n1\t2.5\t3\t4\n",
        2,
        "item id '2.5' is not an integer",
    ),
    (
        "missing column",
        "ratings.dat",
        readers.read_movielens_dat,
        b"1::10::5::9\n1::11::5::9\n1::12::5\n",
        3,
        "found 3",
    ),
    (
        "truncated last line",
        "u.data",
        readers.read_movielens_udata,
        b"1\t2\t3\t4\n5\t6\t7\t8\n9\t1",
        3,
        "expected 4 fields",
    ),
    (
        "bad UTF-8",
        "q.txt",
        readers.read_per_user,
        b"1 2 3\n2 \xff\xfe 4\n",
        2,
        "not valid UTF-8 (byte 0xff at column 3)",
    ),
    (
        "header where none belongs",
        "u.data",
        readers.read_movielens_udata,
        b"user\titem\trating\ttimestamp\n1\t2\t3\t4\n",
        1,
        "looks like a header",
    ),
    (
        "csv without its header",
        "ratings.csv",
        readers.read_movielens_csv,
        b"1,2,3.0,4\n",
        1,
        "expected the header",
    ),
    (
        "non-numeric rating",
        "ratings.csv",
        readers.read_movielens_csv,
        b"userId,movieId,rating,timestamp\n1,2,3.0,4\n1,3,good,5\n",
        3,
        "rating 'good' is not a number",
    ),
    (
        "non-finite timestamp",
        "ratings.csv",
        readers.read_movielens_csv,
        b"userId,movieId,rating,timestamp\n1,2,3.0,nan\n",
        2,
        "timestamp 'nan' is not finite",
    ),
    ("user without items", "q.txt", readers.read_per_user, b"1 2 3\n7\n", 2, "has no items"),
    (
        "user on two lines",
        "q.txt",
        readers.read_per_user,
        b"1 2 3\n2 4\n1 5\n",
        3,
        "has a second line (first on line 1)",
    ),
    (
        "non-integer item in a long line",
        "q.txt",
        readers.read_per_user,
        b"1 2 3\n2 4 5 six 7\n",
        2,
        "item id 'six' is not an integer",
    ),
    (
        "pairs line with three fields",
        "p.txt",
        readers.read_pairs,
        b"1 2\n1 3\n1 2 3\n",
        3,
        "expected 2 fields",
    ),
    (
        "id overflows int64",
        "p.txt",
        readers.read_pairs,
        b"1 2\n1 99999999999999999999999\n",
        2,
        "is out of the 64-bit integer range",
    ),
    (
        "untyped RecBole header",
        "x.inter",
        readers.read_recbole_inter,
        b"user_id\titem_id\n1\t2\n",
        1,
        "is not 'name:type'",
    ),
    (
        "RecBole file without the item field",
        "x.inter",
        readers.read_recbole_inter,
        b"user_id:token\tmovie:token\n1\t2\n",
        1,
        "has no item column 'item_id'",
    ),
    (
        "ragged RecBole row",
        "x.inter",
        readers.read_recbole_inter,
        b"user_id:token\titem_id:token\n1\t2\n1\t2\t3\n",
        3,
        "expected 2 fields",
    ),
    (
        "session file without Time",
        "s.txt",
        readers.read_session_tsv,
        b"SessionId\tItemId\n1\t2\n",
        1,
        "has no timestamp column 'Time'",
    ),
    (
        "non-numeric session time",
        "s.txt",
        readers.read_session_tsv,
        b"SessionId\tItemId\tTime\n1\t2\t3.5\n1\t3\tlater\n",
        3,
        "timestamp 'later' is not a number",
    ),
    (
        "header only",
        "s.txt",
        readers.read_session_tsv,
        b"SessionId\tItemId\tTime\n",
        None,
        "has no data lines",
    ),
    (
        "table without the mapped column",
        "t.csv",
        table_reader,
        b"user,thing\n1,2\n",
        1,
        "has no item column 'item'",
    ),
    (
        "not a parquet file",
        "t.parquet",
        table_reader,
        b"PAR1 but not really",
        None,
        "is not a readable Parquet file",
    ),
    (
        "a k-core that removes everything",
        "p.txt",
        five_core_pairs,
        b"1 2\n1 3\n2 2\n",
        None,
        "(5, 5)-core removes every interaction",
    ),
]


@pytest.fixture
def corpus_spec(monkeypatch):
    def register(name, reader):
        spec = DatasetSpec(
            name="corpus",
            description="malformed corpus",
            files=(SourceFile(name, reader),),
            preprocess=lambda d: d,
            preprocessing="none",
        )
        monkeypatch.setitem(catalog.DATASETS, "corpus", spec)

    return register


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 20


@pytest.mark.parametrize(
    ("case", "name", "reader", "content", "line", "fragment"), CORPUS, ids=[c[0] for c in CORPUS]
)
def test_malformed_file(tmp_path, corpus_spec, case, name, reader, content, line, fragment):
    path = tmp_path / "raw" / name
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(DataFormatError) as caught:
        reader(path)
    error = caught.value
    assert error.path == str(path)
    assert error.line == line
    assert fragment in error.message
    assert str(error).startswith(str(path) if line is None else f"{path}:{line}: ")
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)

    corpus_spec(name, reader)
    cache = tmp_path / "cache"
    with pytest.raises(DataFormatError):
        datasets.prepare("corpus", path, cache, verify=False)
    leftovers = [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []
    assert leftovers == []


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(DataFormatError, match="no such file"):
        readers.read_pairs(tmp_path / "absent.txt")
    with pytest.raises(DataFormatError, match="is a directory"):
        readers.read_pairs(tmp_path)
