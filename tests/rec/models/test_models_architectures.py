"""ETRec, SDAT and SRT: parity with SASRec with their parts off, parameter counts, timestamps."""

from pathlib import Path

import numpy as np
import pytest
import torch

from attnsvm.rec.data.sequences import Sequences
from attnsvm.rec.data.splits import Split
from attnsvm.rec.models import build_model
from attnsvm.rec.train.scoring import check_inputs_available

NUM_ITEMS, MAX_LEN = 40, 12
COMMON = {"hidden_size": 16, "ffn_size": 24, "num_heads": 2, "max_len": MAX_LEN}
PLAIN = {
    "etrec": {"local_window": MAX_LEN, "block_branch": False, "share_ffn": False},
    "sdat": {
        "position": "learned",
        "time_encoding": "none",
        "interval_bias": "none",
        "recency_gain": False,
        "gru_head": False,
    },
}


def sequences(seed: int = 0) -> torch.Tensor:
    seq = torch.randint(
        1, NUM_ITEMS + 1, (4, MAX_LEN), generator=torch.Generator().manual_seed(seed)
    )
    seq[1, :5] = 0
    seq[2, :-1] = 0
    return seq


def event_times(seq: torch.Tensor) -> torch.Tensor:
    gaps = torch.rand(seq.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    return 1.6e9 + torch.cumsum(gaps * 86400 * 3, dim=1)


def built(name: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_model(name, NUM_ITEMS, **{**COMMON, **overrides})


@pytest.mark.parametrize("name", ["etrec", "sdat"])
def test_with_its_parts_off_the_model_is_sasrec_output_for_output(name: str) -> None:
    sasrec, model = built("sasrec"), built(name, **PLAIN[name])
    for ours, theirs in zip(model.parameters(), sasrec.parameters(), strict=True):
        assert torch.equal(ours, theirs)  # the same initial weights from the same seed
    seq = sequences()
    extras = {"timestamps": event_times(seq)} if name == "sdat" else {}
    for training in (True, False):  # dropout masks too: they are drawn from the same stream
        sasrec.train(training)
        model.train(training)
        torch.manual_seed(1)
        expected = sasrec(seq)
        torch.manual_seed(1)
        assert torch.equal(model(seq, **extras), expected)
    assert torch.equal(model.score_last(seq, **extras), sasrec.score_last(seq))


def test_etrec_shares_one_ffn_across_layers() -> None:
    separate = built("etrec", share_ffn=False, num_blocks=3)
    shared = built("etrec", share_ffn=True, num_blocks=3)
    ffn = 2 * 16 * 24 + 16 + 24
    count = sum(p.numel() for p in separate.parameters())
    assert count - sum(p.numel() for p in shared.parameters()) == 2 * ffn
    with pytest.raises(ValueError, match="share_ffn needs an FFN"):
        built("etrec", ffn_size=0, share_ffn=True)


def test_etrec_blocks_of_root_max_len_items() -> None:
    model = built("etrec", block_size=0)  # ⌈√12⌉ = 4, fixed by max_len, not by a batch
    assert {block.attention.long.block_size for block in model.stack.blocks} == {4}
    with pytest.raises(ValueError, match="block_size must be ≥ 0"):
        built("etrec", block_size=-1)


def test_etrec_reads_windows_longer_than_its_local_window_in_chunks() -> None:
    """Chunked local attention at training shapes, the full path at scoring: the same model."""
    model = built("etrec", local_window=3, block_size=4).double().eval()
    seq = sequences(1)
    torch.testing.assert_close(
        model.score_last(seq), model.logits(model(seq)[:, -1]), atol=1e-12, rtol=0
    )


def _split(times: bool) -> Split:
    train = Sequences.from_lists([[1, 2, 3]])
    if times:
        train = Sequences(train.offsets, train.items, train.users, np.arange(3.0))
    return Split(train, None, None, 3, 1, np.arange(4), np.arange(1), "test")


def test_sdat_refuses_data_without_timestamps() -> None:
    model = built("sdat")
    with pytest.raises(ValueError, match="needs event timestamps and dataset 'beauty' has none"):
        check_inputs_available(model, _split(times=False), "beauty")
    check_inputs_available(model, _split(times=True), "ml-100k")
    with pytest.raises(ValueError, match="SDAT needs timestamps"):
        model(sequences())


def test_sdat_age_encoding_needs_last_position_training() -> None:
    with pytest.raises(ValueError, match="use objective 'last'"):
        built("sdat", time_encoding="age")
    assert built("sdat", time_encoding="age", objective="last").objective == "last"


def catalogue(folder: Path, items: list[int]) -> str:
    """A data file over ``items`` (external ids) with a movies.dat beside it."""
    folder.mkdir()
    rng = np.random.default_rng(len(items))
    lines = [" ".join(map(str, [u, *rng.choice(items, 6)])) for u in range(1, 9)]
    lines.append(" ".join(map(str, [9, *items])))  # every item appears
    (folder / "walks.txt").write_text("\n".join(lines) + "\n")
    words = ["red", "blue", "night", "day", "story", "war"]
    movies = [f"{i}::{words[i % 6]} {words[(i // 6) % 6]} ({1990 + i % 9})::Drama" for i in items]
    (folder / "movies.dat").write_text("\n".join(movies) + "\n")
    return str(folder / "walks.txt")


def test_srt_has_the_same_parameters_whatever_the_catalogue(tmp_path) -> None:
    small = catalogue(tmp_path / "small", list(range(1, 13)))
    large = catalogue(tmp_path / "large", list(range(100, 160)))
    options = {**COMMON, "num_buckets": 256}
    a = build_model("srt", 12, features_dataset=small, **options)
    b = build_model("srt", 60, features_dataset=large, **options)
    shapes = {name: p.shape for name, p in a.named_parameters()}
    assert shapes == {name: p.shape for name, p in b.named_parameters()}
    b.load_state_dict(a.state_dict(), strict=True)  # across catalogues, no id mapping
    assert a.output_embedding().shape == (13, 16) and b.output_embedding().shape == (61, 16)
    with pytest.raises(ValueError, match="features_dataset must be the run's dataset"):
        build_model("srt", 13, features_dataset=small, **options)
    with pytest.raises(ValueError, match="features_dataset must name the dataset"):
        build_model("srt", 12, **options)


def test_srt_scores_items_by_their_features(tmp_path) -> None:
    """No row per item: an item is what its features say. Given item 1's features, item 7 gets
    item 1's vector and scores, whatever the two ids."""
    data = catalogue(tmp_path / "data", list(range(1, 13)))
    torch.manual_seed(0)
    model = build_model("srt", 12, features_dataset=data, **COMMON, num_buckets=256).eval()
    table = model.output_embedding()
    assert not torch.equal(table[1], table[7])
    twin = model.tower.item_tokens.clone()
    twin[7] = twin[1]
    model.tower.item_tokens = twin
    table = model.output_embedding()
    assert torch.equal(table[1], table[7])
    scores = model.score_last(sequences()[:, -6:].clamp(max=12))
    assert torch.equal(scores[:, 1], scores[:, 7])
