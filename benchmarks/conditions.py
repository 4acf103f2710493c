"""What a benchmark ran on: the CPU, its vector and matrix units, torch's kernels, the BLAS
threads, and the load average around each measured part; and a busy core to measure beside
(shared by the benchmarks that time anything).

A row is "loaded" when the 1-minute load average, counting the measured run's own threads,
exceeded the machine's cores by more than half a core: some runnable work then waited for a
core, and the time is not a claim. Reproduce on an idle machine: no other jobs, `uptime` below
~0.2 before starting, and the machine left alone for the run.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import time
from pathlib import Path

from threadpoolctl import threadpool_info

from attnsvm.theory._threads import BLAS_THREADS

#: CPU flags worth reporting: they change the float kernels BLAS and torch pick.
FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def machine() -> dict:
    """CPU model and flags, cores, torch's CPU capability, the BLAS libraries and their threads."""
    model, flags = platform.processor() or "unknown", set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    try:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
        torch_threads = torch.get_num_threads()
    except ImportError:
        capability, torch_threads = "no torch", 0
    return {
        "cpu": model,
        "flags": [flag for flag in FLAGS if flag in flags],
        "cores": len(os.sched_getaffinity(0)),
        "torch_cpu_capability": capability,
        "blas": [
            f"{lib['internal_api']} {lib['version']} ({lib['num_threads']} threads)"
            for lib in threadpool_info()
            if lib["user_api"] == "blas"
        ],
        "theory_blas_threads": BLAS_THREADS,
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
        "torch_threads": torch_threads,
        **{name: os.environ.get(name, "unset") for name in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")},
    }


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def loaded(before: float, after: float, threads: int) -> bool:
    """Whether runnable work exceeded the cores around a run that used ``threads`` threads."""
    return max(before + threads, after) > len(os.sched_getaffinity(0)) + 0.5


class OtherWork:
    """The cores other processes kept busy while a measured part ran: ``/proc/stat``'s busy time
    over the part minus this process's and its children's CPU time, over the wall time. Unlike
    the 1-minute load average, it does not count the previous measured run's own decaying
    load. ``with OtherWork() as other: …``, then ``other.cores`` and ``other.loaded``."""

    def __enter__(self):
        self._start = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        busy, own, wall = (b - a for a, b in zip(self._start, self._sample(), strict=True))
        self.cores = max(0.0, (busy - own) / wall) if wall > 0 else 0.0
        # more than half a core of other work: some of the measured part waited for a core
        self.loaded = self.cores > 0.5

    @staticmethod
    def _sample() -> tuple[float, float, float]:
        ticks = os.sysconf("SC_CLK_TCK")
        busy = 0
        for line in Path("/proc/stat").read_text().splitlines():
            fields = line.split()
            if fields[0] == "cpu":  # user nice system idle iowait irq softirq steal
                values = [int(v) for v in fields[1:9]]
                busy = sum(values) - values[3] - values[4]
                break
        mine = os.times()
        own = mine.user + mine.system + mine.children_user + mine.children_system
        return busy / ticks, own, time.monotonic()


def describe(info: dict) -> str:
    """The conditions as markdown lines, for the head of a results section."""
    return "\n".join(
        [
            f"- CPU: {info['cpu']}, {info['cores']} cores, flags {', '.join(info['flags'])}; "
            f"torch CPU capability {info['torch_cpu_capability']}",
            f"- BLAS: {'; '.join(info['blas'])}; theory lab policy: "
            f"{info['theory_blas_threads']} BLAS thread; OPENBLAS_NUM_THREADS="
            f"{info['OPENBLAS_NUM_THREADS']}",
            f"- this process: {info['torch_threads']} torch threads; OMP_NUM_THREADS="
            f"{info['OMP_NUM_THREADS']}, OMP_WAIT_POLICY={info['OMP_WAIT_POLICY']}",
        ]
    )


def _spin(core: int, deadline: float) -> None:
    os.sched_setaffinity(0, {core})
    while time.time() < deadline:
        pass


class BusyCore:
    """A child process keeping one core busy until stopped (or ``bound`` seconds pass)."""

    def __init__(self, bound: float):
        core = max(os.sched_getaffinity(0))
        # "fork": the child only spins, so it starts at once (a spawned one would first spend
        # seconds importing this script's modules)
        context = mp.get_context("fork")
        self.process = context.Process(target=_spin, args=(core, time.time() + bound))

    def __enter__(self):
        self.process.start()
        time.sleep(0.2)  # spinning before the measured solve starts
        return self

    def __exit__(self, *exc):
        self.process.kill()
        self.process.join()


def report() -> dict:
    """Print the conditions and the load average at the start (the head of every timing
    benchmark's output, so a table never travels without them); returns ``machine()``."""
    info = machine()
    info["load_at_start"] = load()
    print(describe(info), flush=True)
    print(
        f"- load average at start: {info['load_at_start']:.2f} (a claim needs it below the cores)"
    )
    return info


def idle_and_busy(workloads, settings, repeats: int, measure) -> dict:
    """Every (workload, setting) idle and beside a busy core, interleaved (workload, idle then
    busy, each setting in turn) ``repeats`` times: ``{(workload, setting, busy): [result, …]}``.
    ``measure(workload, setting, busy)`` returns a dict with its ``"load"`` [before, after]."""
    runs = {(w, s, b): [] for w in workloads for s in settings for b in (False, True)}
    for _ in range(repeats):
        for workload in workloads:
            for busy in (False, True):
                for setting in settings:
                    result = measure(workload, setting, busy)
                    runs[workload, setting, busy].append(result)
                    state = "busy core" if busy else "idle"
                    print(f"{workload} | {setting} | {state}: {result}", flush=True)
    print()
    return runs


def load_range(results: list[dict]) -> str:
    """The lowest and highest load average around ``results``' runs, as ``"a-b"``."""
    loads = [value for result in results for value in result["load"]]
    return f"{min(loads):.2f}-{max(loads):.2f}"


def write_runs(path: str | None, info: dict, runs: dict) -> None:
    """The runs of ``idle_and_busy`` and the conditions as JSON at ``path`` (if given)."""
    if path:
        serial = {" | ".join(map(str, key)): value for key, value in runs.items()}
        Path(path).write_text(json.dumps({"conditions": info, "runs": serial}, indent=1))
