"""The package's one atomic writer: whole files or none, with a plain file's permissions."""

from __future__ import annotations

import os
import stat

import pytest

from attnsvm._atomic import atomic_path, write_json, write_text


def test_a_failed_write_leaves_nothing(tmp_path):
    with (
        pytest.raises(RuntimeError, match="disk full"),
        atomic_path(tmp_path / "model.safetensors") as temporary,
    ):
        temporary.write_text("half")
        raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_keeps_the_old_file(tmp_path):
    write_text(tmp_path / "a.json", "old")
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "a.json") as temporary:
        temporary.write_text("new, half")
        raise RuntimeError
    assert (tmp_path / "a.json").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_the_temporary_keeps_the_suffix(tmp_path):
    with atomic_path(tmp_path / "x.npz") as temporary:
        assert temporary.suffix == ".npz" and temporary.name.startswith(".x.npz.")
        temporary.write_bytes(b"")


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_files_get_the_permissions_a_plain_open_gives(tmp_path, umask):
    old = os.umask(umask)
    try:
        write_json(tmp_path / "written.json", {"a": 1})
        with open(tmp_path / "plain.json", "w"):
            pass
    finally:
        os.umask(old)
    written = stat.S_IMODE((tmp_path / "written.json").stat().st_mode)
    plain = stat.S_IMODE((tmp_path / "plain.json").stat().st_mode)
    assert written == plain == 0o666 & ~umask
