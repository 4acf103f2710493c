"""Removing a mechanism fails the suite: each entry edits one line of a copy of the package
(a term zeroed, a mask widened, a switch ignored, a sign flipped) and runs the tests that guard
it, which must fail. The first removal in each module runs with the suite; all of them (about
5 minutes on 2 cores): ``pytest -m slow -n 2 tests/test_mechanism_removals.py``.

These are removals beyond the ones each mechanism test was first seen to fail on; where one
survives, the mechanism's test is too weak (or the removal computes the same function, and
does not belong here: the attack mask's detach in AC-TSR's calibrated stream, whose gradient
the adversary's own step overwrites; CRR's advantage weights, already computed without
gradients)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

import attnsvm

REPO = Path(__file__).resolve().parents[1]
MECHANISMS = "tests/rec/mechanisms"


class Removal(NamedTuple):
    name: str
    module: str  # path under the package
    line: str  # text that occurs exactly once in it
    replacement: str
    tests: str = MECHANISMS


REMOVALS = [
    Removal(
        "pos-none",
        "rec/nn/embedding.py",
        "x = x + self.position.weight[self.max_len - length :]\n",
        "pass\n",
    ),
    Removal(
        "pos-from-left",
        "rec/nn/embedding.py",
        "self.position.weight[self.max_len - length :]",
        "self.position.weight[:length]",
        "tests/rec/models/test_expensive_paths.py",
    ),
    Removal(
        "logits-pad-col",
        "rec/models/base.py",
        '        scores[..., 0] = float("-inf")\n',
        "",
        "tests/rec/models/test_models_overfit.py",
    ),
    Removal(
        "strec-no-noise",
        "rec/models/strec.py",
        "        if self.training:\n            score = score + torch.randn_like(score)\n",
        "",
    ),
    Removal(
        "strec-last-not-forced", "rec/models/strec.py", '        score[:, -1] = float("inf")\n', ""
    ),
    Removal(
        "strec-noncausal",
        "rec/models/strec.py",
        "keep_mask = (earlier & valid[:, None, :]) | itself",
        "keep_mask = valid[:, None, :] | itself",
    ),
    Removal(
        "strec-no-time",
        "rec/models/strec.py",
        "raw = self.mlp(gaps.unsqueeze(-1)).squeeze(-1)",
        "raw = self.mlp(torch.zeros_like(gaps).unsqueeze(-1)).squeeze(-1)",
    ),
    Removal(
        "bsarec-beta-not-squared",
        "rec/models/bsarec.py",
        "low + self.sqrt_beta**2 * (x - low)",
        "low + self.sqrt_beta * (x - low)",
    ),
    Removal(
        "bsarec-alpha-swapped",
        "rec/models/bsarec.py",
        "h = self.alpha * self.filter(x, queries) + (1 - self.alpha) * attention_branch",
        "h = (1 - self.alpha) * self.filter(x, queries) + self.alpha * attention_branch",
    ),
    Removal(
        "bsarec-allpass",
        "rec/models/bsarec.py",
        "self.keep_bins = cutoff // 2 + 1\n",
        "self.keep_bins = 10**6\n",
    ),
    Removal(
        "bsarec-noncausal-attn",
        "rec/models/bsarec.py",
        "keep_mask = attention_mask(valid, causal=True)\n        x = self.embed(item_seq)\n",
        "keep_mask = attention_mask(valid, causal=False)\n        x = self.embed(item_seq)\n",
    ),
    Removal(
        "convformer-centred",
        "rec/models/convformer.py",
        "padded = F.pad(x.transpose(1, 2), (kernel - 1, 0))",
        "padded = F.pad(x.transpose(1, 2), (kernel // 2, kernel - 1 - kernel // 2))",
    ),
    Removal(
        "convformer-no-flip-fft",
        "rec/models/convformer.py",
        "impulse = self.weight[:, 0].flip(-1).T",
        "impulse = self.weight[:, 0].T",
        "tests/rec/zoo/test_zoo_mechanisms.py",
    ),
    Removal(
        "etrec-sum-not-gate",
        "rec/nn/block_attention.py",
        "return gate * short + (1 - gate) * long",
        "return short + long",
    ),
    Removal(
        "etrec-no-share",
        "rec/models/etrec.py",
        "share_ffn=config.share_ffn,\n",
        "share_ffn=False,\n",
    ),
    Removal(
        "ssept-no-user",
        "rec/models/ssept.py",
        "x = torch.cat([items, user[:, None, :].expand(-1, length, -1)], dim=-1)",
        "x = torch.cat([items, torch.zeros_like(user)[:, None, :].expand(-1, length, -1)], dim=-1)",
    ),
    Removal(
        "ssept-no-user-sse",
        "rec/models/ssept.py",
        "return self.user_sse(torch.where(known, users + 1, 0))",
        "return torch.where(known, users + 1, 0)",
    ),
    Removal(
        "ssept-no-item-sse",
        "rec/models/ssept.py",
        "items = self.items(self.item_sse(item_seq))",
        "items = self.items(item_seq)",
    ),
    Removal(
        "bert4rec-no-head",
        "rec/models/bert4rec.py",
        "if self.head is not None:\n            hidden",
        "if False:\n            hidden",
    ),
    Removal(
        "bert4rec-no-mask-at-inference",
        "rec/models/bert4rec.py",
        "return torch.cat([item_seq, mask_column], dim=1)",
        "return item_seq",
    ),
    Removal(
        "bert4rec-no-fallback-mask",
        "rec/models/bert4rec.py",
        "        masked[empty, fallback[empty]] = True\n",
        "",
        "tests/rec/models/test_models_protocol.py",
    ),
    Removal(
        "adamct-alpha-const",
        "rec/models/adamct.py",
        "alpha = torch.sigmoid(self.mixture(x.sum(dim=1, keepdim=True) / self.max_len))",
        "alpha = torch.full_like(x[:, :1, :1], 0.5)",
    ),
    Removal("adamct-no-se", "rec/models/adamct.py", "return h * weights.unsqueeze(-1)", "return h"),
    Removal(
        "adamct-noncausal",
        "rec/models/adamct.py",
        "keep_mask = attention_mask(item_seq != 0, causal=True)",
        "keep_mask = attention_mask(item_seq != 0, causal=False)",
    ),
    Removal(
        "matrrec-no-mamba",
        "rec/models/matrrec.py",
        "x = self.mamba_norm(x + self.dropout(self.mamba(x, valid))) * valid",
        "x = x * valid",
    ),
    Removal("matrrec-no-D", "rec/models/matrrec.py", "return y + u * D\n", "return y\n"),
    Removal(
        "matrrec-no-gate",
        "rec/models/matrrec.py",
        "return self.out_proj(y * F.silu(z))",
        "return self.out_proj(y)",
    ),
    Removal(
        "actsr-no-order",
        "rec/models/actsr.py",
        "order_term = later * order - F.softplus(order)\n",
        "order_term = 0 * order\n",
    ),
    Removal(
        "actsr-no-distance",
        "rec/models/actsr.py",
        "distance_term = -((gap - distance) ** 2) * self.distance_scale**2 / 2\n",
        "distance_term = 0 * distance\n",
    ),
    Removal(
        "actsr-no-gate",
        "rec/models/actsr.py",
        "weights = masked_softmax(gate * spatial + (1 - gate) * calibrated)",
        "weights = calibrated",
    ),
    Removal(
        "actsr-ascent-sign",
        "rec/models/actsr.py",
        "loss = -loss_of_hidden(hidden) + model.config.mask_loss_weight",
        "loss = loss_of_hidden(hidden) + model.config.mask_loss_weight",
    ),
    Removal(
        "actsr-no-penalty",
        "rec/models/actsr.py",
        "loss = -loss_of_hidden(hidden) + model.config.mask_loss_weight * model.mask_penalty()",
        "loss = -loss_of_hidden(hidden)",
    ),
    Removal(
        "actsr-no-noise",
        "rec/models/actsr.py",
        "weights = masked_softmax(spatial * mask + noise * (1 - mask))",
        "weights = masked_softmax(spatial * mask)",
    ),
    Removal(
        "sdat-bias-sign",
        "rec/nn/time_intervals.py",
        "return -slope[None, :, None, None] * distance[:, None]",
        "return slope[None, :, None, None] * distance[:, None]",
    ),
    Removal(
        "sdat-bias-no-unit",
        "rec/nn/time_intervals.py",
        "distance = torch.log1p(seconds / self.unit).to(dtype)",
        "distance = torch.log1p(seconds).to(dtype)",
    ),
    Removal(
        "sdat-gain-sign",
        "rec/nn/time_intervals.py",
        "torch.exp(-units / scale)",
        "torch.exp(units / scale)",
    ),
    Removal(
        "sdat-gap-zero",
        "rec/nn/time_intervals.py",
        "buckets = time_buckets(times[:, 1:] - times[:, :-1], self.num_buckets)",
        "buckets = time_buckets(times[:, 1:] - times[:, 1:], self.num_buckets)",
    ),
    Removal(
        "nst-prefix-off",
        "rec/models/nstransformer.py",
        'prefix = self.objective == "causal"',
        "prefix = False",
    ),
    Removal(
        "nst-rating-leak",
        "rec/models/nstransformer.py",
        "previous[:, 1:] = ratings[:, :-1]\n",
        "previous[:, 1:] = ratings[:, 1:]\n",
    ),
    Removal(
        "nst-no-denorm",
        "rec/models/nstransformer.py",
        "            hidden = hidden * std[:, columns] + mean[:, columns]\n",
        "",
    ),
    Removal(
        "nst-no-delta",
        "rec/models/nstransformer.py",
        "hidden = self.stack(x, valid, last_query_only, pair_bias=bias)",
        "hidden = self.stack(x, valid, last_query_only, pair_bias=None)",
    ),
    Removal(
        "nst-no-rating-input",
        "rec/models/nstransformer.py",
        "raw = raw + self.rating(features / torch.tensor([config.rating_scale, 1.0]).to(raw))",
        "pass",
    ),
    Removal(
        "smm-no-head",
        "rec/models/smm.py",
        "if self.head is not None:\n            hidden = self.head(hidden)",
        "if False:\n            hidden = self.head(hidden)",
    ),
    Removal(
        "smm-no-mask-token",
        "rec/models/smm.py",
        "return torch.cat([item_seq, mask_column], dim=1)",
        "return item_seq",
    ),
    Removal(
        "cope-forward-count",
        "rec/nn/cope.py",
        "counted = gates.flip(-1).cumsum(dim=-1).flip(-1)",
        "counted = gates.cumsum(dim=-1)",
    ),
    Removal(
        "cope-interp-swapped",
        "rec/nn/cope.py",
        "return high * weight + low * (1.0 - weight)",
        "return low * weight + high * (1.0 - weight)",
    ),
    Removal(
        "adt-recon-pairing",
        "rec/models/adt.py",
        "torch.stack([decoded[-1 - layer] for layer in rebuilt])",
        "torch.stack([decoded[layer] for layer in rebuilt])",
    ),
    Removal(
        "adt-head-class0",
        "rec/models/adt.py",
        "return -log_probs.diagonal(dim1=-2, dim2=-1).mean(-1)",
        "return -log_probs[..., 0].mean(-1)",
    ),
    Removal(
        "adt-no-shift",
        "rec/models/adt.py",
        "shifted = F.pad(item_seq[:, :-1], (1, 0))",
        "shifted = item_seq",
    ),
    Removal(
        "adt-embnorm-squared",
        "rec/models/adt.py",
        'terms["embedding_norm"] = self.items.input.weight.norm()',
        'terms["embedding_norm"] = self.items.input.weight.norm() ** 2',
    ),
    Removal(
        "bicat-forward-reversed",
        "rec/models/bicat.py",
        "inputs, targets = source[:, :-1], source[:, 1:]",
        "inputs, targets = source[:, 1:], source[:, :-1]",
    ),
    Removal(
        "bicat-kl-one-sided",
        "rec/models/bicat.py",
        "per_unit = 0.5 * (log_p.exp() * (log_p - log_q) + log_q.exp() * (log_q - log_p))",
        "per_unit = log_p.exp() * (log_p - log_q)",
    ),
    Removal(
        "bicat-forward-no-negatives",
        "rec/models/bicat.py",
        'if self.config.forward_negatives == "own":',
        "if False:",
    ),
    Removal(
        "mrt-swap-predicts-source",
        "rec/models/mrtransformer.py",
        "swapped_y, partner[:, -1]",
        "swapped_y, source[:, -1]",
    ),
    Removal(
        "mrt-coverage-self",
        "rec/models/mrtransformer.py",
        "before = attention.cumsum(1) - attention\n",
        "before = attention.cumsum(1)\n",
    ),
    Removal(
        "mrt-items-see-prefs",
        "rec/models/mrtransformer.py",
        "~is_item[:, :, None], real[:, None, :], is_item[:, None, :] & is_item[:, :, None]",
        "~is_item[:, :, None], real[:, None, :], real[:, None, :]",
    ),
    Removal(
        "mrt-no-common-mse",
        "rec/models/mrtransformer.py",
        "F.mse_loss(common_x, common_y) + F.mse_loss(swapped_x, p_x)",
        "F.mse_loss(swapped_x, p_x)",
    ),
    Removal(
        "pi-own-label",
        "rec/models/pitransformer.py",
        "query_mask = torch.cat([past, causal & ~own, own], dim=1)[None, None]",
        "query_mask = torch.cat([past, causal, own], dim=1)[None, None]",
    ),
    Removal(
        "pi-no-memory",
        "rec/models/pitransformer.py",
        "remembered = empty if memory is None else memory[index][None]",
        "remembered = empty",
    ),
    Removal(
        "pi-no-labels",
        "rec/models/pitransformer.py",
        "query, labelled = state, state + self.label_embedding(labels)[None]",
        "query, labelled = state, state",
    ),
    Removal(
        "rlt-order-swapped",
        "rec/models/rlt4rec.py",
        "tokens = torch.stack([rated, chosen], dim=2)",
        "tokens = torch.stack([chosen, rated], dim=2)",
    ),
    Removal(
        "rlt-forward-item-token",
        "rec/models/rlt4rec.py",
        "states = self.token_states(item_seq, ratings, self.config.target_rating)[:, 2::2]",
        "states = self.token_states(item_seq, ratings, self.config.target_rating)[:, 1::2]",
    ),
    Removal(
        "crr-no-done",
        "rec/rl/crr.py",
        "config.gamma * (1 - step.done) * next_values",
        "config.gamma * next_values",
    ),
    Removal(
        "crr-reward-uncentered",
        "rec/rl/crr.py",
        "return (ratings - (scale[0] + scale[1]) / 2).to(torch.float32)",
        "return ratings.to(torch.float32)",
    ),
    Removal(
        "crr-max-twins",
        "rec/rl/crr.py",
        "next_values.min(dim=0).values",
        "next_values.max(dim=0).values",
    ),
    Removal(
        "stream-replay-no-memory",
        "rec/stream/runner.py",
        'replay["memory"] = memory if self.settings.memory else None',
        'replay["memory"] = None',
    ),
    Removal(
        "stream-replay-no-advance",
        "rec/stream/runner.py",
        '            replay["position"] += 1\n',
        "",
    ),
    Removal(
        "gbce-beta-1",
        "rec/nn/losses.py",
        "per_position = beta * F.softplus(-positive_logits) + negative_terms",
        "per_position = F.softplus(-positive_logits) + negative_terms",
    ),
    Removal(
        "bce-hits-kept",
        "rec/nn/losses.py",
        "negative_terms = F.softplus(negative_logits).masked_fill(hit, 0.0).sum(-1)",
        "negative_terms = F.softplus(negative_logits).sum(-1)",
        "tests/rec/nn/test_nn_losses.py",
    ),
    Removal("sam-no-restore", "rec/train/sam.py", "p.sub_(step)", "pass"),
    Removal(
        "sam-unnormalised",
        "rec/train/sam.py",
        'scale = group["rho"] / (norm + 1e-12)',
        'scale = group["rho"] + 0 * norm',
    ),
    Removal(
        "etrec-block-leak",
        "rec/nn/block_attention.py",
        "(ends[None, None, :] <= positions[None, :, None])",
        "(ends[None, None, :] <= positions[None, :, None] + self.block_size)",
        "tests/rec/zoo/test_zoo_architectures.py",
    ),
    Removal(
        "local-window-offbyone",
        "rec/nn/local_attention.py",
        "band = (gap >= 0) & (gap < window)",
        "band = (gap >= 0) & (gap <= window)",
        "tests/rec/nn/test_nn_local_block.py",
    ),
    Removal(
        "encoder-padding-keys",
        "rec/nn/blocks.py",
        "keep_mask = attention_mask(valid, self.causal)",
        "keep_mask = attention_mask(torch.ones_like(valid), self.causal)",
    ),
    Removal(
        "generate-no-seen",
        "rec/train/generate.py",
        '.masked_fill(seen[live], float("-inf"))',
        "",
        "tests/rec/train/test_train_staged.py",
    ),
    Removal(
        "generate-no-advance",
        "rec/train/generate.py",
        "sequence[live] = torch.cat([sequence[live, 1:], best[:, None]], dim=1)",
        "pass",
        "tests/rec/models/test_expensive_paths.py",
    ),
    Removal(
        "generate-everyone",
        "rec/train/generate.py",
        "wanted = np.minimum(np.maximum(below - lengths, 0), items)",
        "wanted = np.full_like(lengths, items)",
        "tests/rec/models/test_expensive_paths.py",
    ),
    Removal(
        "adamct-se-left-aligned",
        "rec/models/adamct.py",
        "self.squeeze.weight[:, -width:]",
        "self.squeeze.weight[:, :width]",
        "tests/rec/zoo/test_zoo_models.py",
    ),
    Removal(
        "matrrec-delta-at-padding",
        "rec/models/matrrec.py",
        "delta = F.softplus(self.dt_proj(low)) * valid",
        "delta = F.softplus(self.dt_proj(low))",
    ),
    Removal(
        "crr-polyak-copy",
        "rec/rl/crr.py",
        "[s for _, s in pairs], tau)",
        "[s for _, s in pairs], 1.0)",
    ),
    Removal(
        "trainer-last-not-best",
        "rec/train/trainer.py",
        "    load_weights(model, run.work / WEIGHTS)\n",
        "    save_weights(model, run.work / WEIGHTS)\n",
        "tests/rec/train/test_train_trainer.py",
    ),
    Removal(
        "ranking-exclude-off",
        "rec/eval/ranking.py",
        "    exclude = task.exclude.select(order) if exclude_seen else None",
        "    exclude = None",
        "tests/rec/eval/test_eval_ranking.py",
    ),
]


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory) -> Path:
    """A copy of the installed package's source, which the removals edit one at a time."""
    root = tmp_path_factory.mktemp("src")
    shutil.copytree(Path(attnsvm.__file__).parent, root / "attnsvm")
    return root


#: the suite's share: the first removal in each module (the others are ``slow``)
FIRST_IN_MODULE = {removal.module: removal.name for removal in reversed(REMOVALS)}


def marked(removal: Removal):
    first = FIRST_IN_MODULE[removal.module] == removal.name
    return pytest.param(removal, id=removal.name, marks=() if first else pytest.mark.slow)


@pytest.mark.parametrize("removal", [marked(removal) for removal in REMOVALS])
def test_removing_the_mechanism_fails_its_tests(removal: Removal, package_copy: Path) -> None:
    module = package_copy / "attnsvm" / removal.module
    source = module.read_text()
    assert source.count(removal.line) == 1, f"{removal.module} no longer has {removal.line!r}"
    edited = source.replace(removal.line, removal.replacement)
    compile(edited, str(module), "exec")  # the removal, not a syntax error, is what must fail
    module.write_text(edited)
    try:
        env = {**os.environ, "PYTHONPATH": str(package_copy)}
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
        result = subprocess.run(
            [*command, "-p", "no:xdist", removal.tests],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        module.write_text(source)
    assert result.returncode == 1, f"{removal.name} survived:\n{result.stdout[-2000:]}"
