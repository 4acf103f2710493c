"""The prequential runner: every chunk of the stream is predicted before the model learns from it.

For chunk k of ``stream.chunk_size`` events (global time order, ``events.py``):

1. **predict** (``predict_chunk``): the model, as the update of chunk k − 1 left it, in eval mode
   and without gradients, scores every event of the chunk with full ranking (``learner.py``);
   the sums go into the cumulative log-loss, HR@k and NDCG@k. The Transformer-XL memory for
   chunk k + 1 is this pass's (the chunk's labelled states, detached);
2. **update** (``update_chunk``): one AdamW step on the mean cross-entropy of the chunk's events
   (train mode, the memory of chunk k − 1) and of one chunk of each of the R replay streams.
   A replay stream starts at a random chunk before k with an empty memory, replays the stream
   forward chunk by chunk with a memory of its own, and starts afresh when it reaches chunk k;
   replay losses join the step, never the metrics.

Each chunk re-seeds dropout from ``(seed, k)`` and each replay start from ``(seed, k, r)``, so a
run resumed from the state saved at a chunk boundary (``resume.pt``, every ``save_every`` chunks,
atomically) gives the numbers of an uninterrupted run (a test checks). The run directory is a
``checkpoint.RunDirectory``: ``config.json`` (the ``StreamConfig``), ``model.json``,
``id_maps.json``, ``log.jsonl`` (a record every ``log_every`` chunks: cumulative and window
metrics, events per second), then ``model.safetensors`` (the final weights) and ``metrics.json``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from attnsvm._atomic import check_output, write_json
from attnsvm.rec.stream.config import StreamConfig, load_stream_config, save_stream_config
from attnsvm.rec.stream.events import EventStream, load_stream
from attnsvm.rec.stream.learner import Memory, Totals, build_stream_model, chunk_states, score_chunk
from attnsvm.rec.train.checkpoint import (
    METRICS,
    RESUME,
    WEIGHTS,
    RunDirectory,
    load_resume_state,
    save_resume_state,
    save_weights,
)

STATE_KEYS = (
    "chunk",
    "model",
    "optimizer",
    "memory",
    "replay",
    "totals",
    "window",
    "log",
    "seconds",
)


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


class Prequential:
    """One stream run's moving parts: the stream, the model, its optimiser and the state."""

    def __init__(self, config: StreamConfig, stream: EventStream) -> None:
        self.config = config
        self.settings = config.stream
        self.stream = stream
        self.chunks = stream.chunks(self.settings.chunk_size, self.settings.max_events)
        self.model, self.model_info = build_stream_model(config, stream.num_items)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=self.settings.lr, weight_decay=self.settings.weight_decay
        )
        self.next_chunk = 0
        self.memory: Memory = None  # the previous chunk's, for this chunk's passes
        self.next_memory: Memory = None  # this chunk's, from its prediction pass
        self.replay: list[dict[str, Any]] = [
            {"position": -1, "memory": None} for _ in range(self.settings.replay_streams)
        ]
        self.totals, self.window = Totals(), Totals()
        self.log: list[dict[str, Any]] = []
        self.seconds = 0.0
        self.candidates = torch.zeros(stream.num_items + 1, dtype=torch.bool)

    # -- one chunk ---------------------------------------------------------------------------

    def inputs(self, chunk: slice) -> tuple[torch.Tensor, torch.Tensor]:
        index = np.arange(chunk.start, chunk.stop)
        histories = self.stream.histories(index, self.settings.history)
        return torch.from_numpy(histories), torch.from_numpy(self.stream.item[index])

    def predict_chunk(self, index: int) -> Totals:
        """Score chunk ``index`` with the current parameters; sets the next chunk's memory."""
        histories, labels = self.inputs(self.chunks[index])
        self.model.eval()
        with torch.no_grad():
            hidden, memory = chunk_states(self.model, histories, labels, self.memory)
            logits = self.model.logits(hidden)
        candidates = self.candidates if self.settings.rank_over == "seen" else None
        scored = score_chunk(logits, labels, candidates, self.settings.k)
        self.candidates[labels] = True
        self.next_memory = memory if self.settings.memory else None
        return scored

    def update_chunk(self, index: int) -> float:
        """One step on chunk ``index`` and one replayed chunk per replay stream; the mean loss."""
        torch.manual_seed(_seed(self.settings.seed, index))
        self.model.train()
        histories, labels = self.inputs(self.chunks[index])
        hidden, _ = chunk_states(self.model, histories, labels, self.memory)
        losses = [F.cross_entropy(self.model.logits(hidden), labels, reduction="sum")]
        count = labels.numel()
        for number, replay in enumerate(self.replay if index else []):
            if not 0 <= replay["position"] < index:
                rng = np.random.default_rng([self.settings.seed, index, number])
                replay["position"], replay["memory"] = int(rng.integers(0, index)), None
            histories, labels = self.inputs(self.chunks[replay["position"]])
            hidden, memory = chunk_states(self.model, histories, labels, replay["memory"])
            losses.append(F.cross_entropy(self.model.logits(hidden), labels, reduction="sum"))
            count += labels.numel()
            replay["position"] += 1
            replay["memory"] = memory if self.settings.memory else None
        loss = torch.stack(losses).sum() / count
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.settings.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.grad_clip)
        self.optimizer.step()
        self.memory = self.next_memory
        return float(loss.detach())

    # -- state ---------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "chunk": self.next_chunk,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "memory": self.memory or [],
            "replay": [
                {"position": r["position"], "memory": r["memory"] or []} for r in self.replay
            ],
            "totals": asdict(self.totals),
            "window": asdict(self.window),
            "log": json.dumps(self.log),
            "seconds": self.seconds,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.next_chunk = int(state["chunk"])
        self.memory = list(state["memory"]) or None
        self.replay = [
            {"position": int(r["position"]), "memory": list(r["memory"]) or None}
            for r in state["replay"]
        ]
        self.totals, self.window = Totals(**state["totals"]), Totals(**state["window"])
        self.log = json.loads(state["log"])
        self.seconds = float(state["seconds"])
        if self.next_chunk:
            seen = self.stream.item[: self.chunks[self.next_chunk - 1].stop]
            self.candidates[torch.from_numpy(seen)] = True

    def record(self) -> dict[str, Any]:
        """The log record of the chunks so far: cumulative and window metrics, throughput."""
        k = self.settings.k
        record = {
            "chunk": self.next_chunk,
            **self.totals.metrics(k),
            "window": self.window.metrics(k),
            "events_per_second": self.totals.events / max(self.seconds, 1e-9),
            "seconds": self.seconds,
        }
        self.log.append(record)
        self.window = Totals()
        return record


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("stream"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>7.0f} events/s"),
        TextColumn("HR@k {task.fields[hr]:.4f}"),
        TimeRemainingColumn(),
        disable=not enabled,
        console=Console(stderr=True),
    )


def run_stream(
    config: StreamConfig,
    run_dir: str | Path,
    *,
    progress: bool = False,
    stop_after: int | None = None,
) -> dict[str, Any] | None:
    """Run the stream of ``config`` into the new run directory ``run_dir``; returns the
    published ``metrics.json``. ``stop_after``: stop once that many chunks are done and their
    state saved, leaving the run to ``resume_stream`` (None when it stopped). The stream is read
    and the model built before the run directory exists, so bad data leaves nothing behind (as
    ``train``)."""
    check_output(RunDirectory(run_dir).final, folder=True)
    runner = _runner(config)
    run = RunDirectory.create(run_dir)
    try:
        save_stream_config(config, run.work / "config.json")
        return _run(runner, run, None, progress, stop_after)
    finally:
        run.release()


def resume_stream(
    run_dir: str | Path, *, progress: bool = False, stop_after: int | None = None
) -> dict[str, Any] | None:
    """Continue the interrupted stream run ``run_dir`` from its last saved chunk."""
    run = RunDirectory.for_resume(run_dir)
    try:
        config = load_stream_config(run.work / "config.json")
        if run.complete:
            metrics = json.loads((run.work / METRICS).read_text())
            run.finish()
            return metrics
        state = load_resume_state(run.work / RESUME, STATE_KEYS) if run.resumable else None
        return _run(_runner(config), run, state, progress, stop_after)
    finally:
        run.release()


def _runner(config: StreamConfig) -> Prequential:
    return Prequential(config, load_stream(config.data.dataset, config.data.root))


def _run(
    runner: Prequential,
    run: RunDirectory,
    state: dict[str, Any] | None,
    progress: bool,
    stop_after: int | None,
) -> dict[str, Any] | None:
    settings = runner.config.stream
    if state is not None:
        runner.restore(state)
    else:
        _write_header(run, runner)
    with _progress(progress) as bar:
        task = bar.add_task(
            "stream", total=len(runner.chunks), completed=runner.next_chunk, rate=0.0, hr=0.0
        )
        for index in range(runner.next_chunk, len(runner.chunks)):
            started = time.perf_counter()
            scored = runner.predict_chunk(index)
            runner.update_chunk(index)
            runner.seconds += time.perf_counter() - started
            runner.totals.add(scored)
            runner.window.add(scored)
            runner.next_chunk = index + 1
            last = runner.next_chunk == len(runner.chunks)
            if runner.next_chunk % settings.log_every == 0 or last:
                runner.record()
                run.write_log(runner.log)
            if (
                runner.next_chunk % settings.save_every == 0
                or last
                or runner.next_chunk == stop_after
            ):
                save_resume_state(run.work / RESUME, runner.state())
            metrics = runner.totals.metrics(settings.k)
            rate = runner.totals.events / max(runner.seconds, 1e-9)
            bar.update(task, completed=runner.next_chunk, rate=rate, hr=metrics[f"HR@{settings.k}"])
            if runner.next_chunk == stop_after and not last:
                return None
    save_weights(runner.model, run.work / WEIGHTS)
    metrics = {
        **runner.totals.metrics(settings.k),
        "chunks": len(runner.chunks),
        "rank_over": settings.rank_over,
        "events_per_second": runner.totals.events / max(runner.seconds, 1e-9),
        "seconds": runner.seconds,
    }
    write_json(run.work / METRICS, metrics)
    run.finish()
    return metrics


def _write_header(run: RunDirectory, runner: Prequential) -> None:
    stream = runner.stream
    write_json(run.work / "model.json", {**runner.model_info, "num_items": stream.num_items})
    maps = {"items": stream.item_ids.tolist(), "users": stream.user_ids.tolist()}
    write_json(run.work / "id_maps.json", maps)
