"""Decompression and expansion bombs are refused while they are read, not after: the gzip stream
stops one block past the cap, a session pickle is measured before any session is expanded, and
each cap comes from its environment variable, checked like any other number
(``attnsvm.rec.data.limits``). The corpus (``reliability_command_cases``) runs the same bombs
through the command line."""

from __future__ import annotations

import gzip
import pickle
import re

import pytest

from attnsvm.rec.config_base import ConfigError
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.limits import DECOMPRESSED_BYTES, EXPANDED_EVENTS
from attnsvm.rec.data.srgnn import read_srgnn_pickle
from attnsvm.rec.data.tables import TableLayout, read_with_report

BLOCK = 1 << 20  # what the gzip reader decompresses at a time
LAYOUT = TableLayout({"user": "user", "item": "item"})


def gzip_bomb(size: int) -> bytes:
    """A gzipped CSV of ``size`` bytes of one repeated row: about a thousandth of it on disk."""
    row = b"1,2\n"
    return gzip.compress(b"user,item\n" + row * (size // len(row)), compresslevel=9)


def test_a_gzip_bomb_stops_one_block_past_the_cap(monkeypatch):
    bomb = gzip_bomb(256 * BLOCK)  # 256 MiB of rows in about a quarter of a megabyte
    assert len(bomb) < BLOCK
    monkeypatch.setenv(DECOMPRESSED_BYTES.variable, str(BLOCK))
    with pytest.raises(DataFormatError) as refused:
        read_with_report("bomb.csv.gz", LAYOUT, bomb)
    read = int(re.search(r"decompresses to at least ([\d,]+) bytes", str(refused.value))[1]
               .replace(",", ""))  # fmt: skip
    assert BLOCK < read <= 2 * BLOCK, read  # stopped at the block that crossed the cap
    assert "set ATTNSVM_MAX_DECOMPRESSED_BYTES higher" in str(refused.value)


def test_a_gzip_table_at_the_cap_is_read_whole(monkeypatch):
    text = b"user,item\n" + b"".join(b"%d,%d\n" % (k % 7, k % 5) for k in range(1000))
    monkeypatch.setenv(DECOMPRESSED_BYTES.variable, str(len(text)))
    table, report = read_with_report("t.csv.gz", LAYOUT, gzip.compress(text))
    assert report["rows"] == 1000 and report["compressed"] == "gzip" and len(table) > 0
    monkeypatch.setenv(DECOMPRESSED_BYTES.variable, str(len(text) - 1))
    with pytest.raises(DataFormatError, match=rf"at least {len(text):,} bytes, over the cap"):
        read_with_report("t.csv.gz", LAYOUT, gzip.compress(text))


@pytest.mark.parametrize(
    ("value", "layout"),
    [
        ([list(range(1, 3001))] * 200_000, "sessions"),  # all_train_seq.txt: 6·10⁸ events
        ((([list(range(1, 3001))] * 200_000), [1] * 200_000), "prefixes"),  # test.txt's form
    ],
    ids=["training sessions", "test prefixes"],
)
def test_a_session_pickle_is_measured_before_it_is_expanded(value, layout):
    data = pickle.dumps(value, protocol=2)
    assert len(data) < 2 * BLOCK  # one session stored once, referenced 200,000 times
    with pytest.raises(DataFormatError, match=rf"its {layout} expand to 600,000,000 events"):
        read_srgnn_pickle("all_train_seq.txt", data)


def test_a_session_pickle_at_the_cap_is_read(monkeypatch):
    data = pickle.dumps([[1, 2, 3]] * 4, protocol=2)
    monkeypatch.setenv(EXPANDED_EVENTS.variable, "12")
    assert len(read_srgnn_pickle("s.txt", data)) == 12
    monkeypatch.setenv(EXPANDED_EVENTS.variable, "11")
    with pytest.raises(DataFormatError, match=r"12 events, over the cap of 11 .*_MAX_EVENTS"):
        read_srgnn_pickle("s.txt", data)


def test_the_caps_default_and_are_checked_like_every_number(monkeypatch):
    for limit, default in ((DECOMPRESSED_BYTES, 2**29), (EXPANDED_EVENTS, 10**8)):
        monkeypatch.delenv(limit.variable, raising=False)
        assert limit.value() == default
        monkeypatch.setenv(limit.variable, "1_000")
        assert limit.value() == 1000
        for bad, message in (("0", r"must lie in \[1, "), ("-5", r"must lie in"),
                             ("2.5", r"must be int, got '2.5'"), ("", r"must be int")):  # fmt: skip
            monkeypatch.setenv(limit.variable, bad)
            with pytest.raises(ConfigError, match=rf"environment: {limit.variable} {message}"):
                limit.value()
