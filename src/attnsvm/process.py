"""Process-wide settings: how many threads torch uses, and how freed memory is kept.

**Threads.** torch's OpenMP pool starts one thread per core and, between parallel regions,
spins waiting for work. When another process keeps a core busy, a spinning thread holds a
core its sibling needs and every parallel region waits for the descheduled one: on the 2-core
reference machine, SASRec+ on ML-1M trained at 148 samples/s beside one busy core against 452
idle, and the demo's small model at 1,500 against 5,700 (``benchmarks/train_contention.py``).
With one thread beside that busy core the figures were 304 and 5,100. ``OMP_WAIT_POLICY=PASSIVE``
stops the spinning but costs small models most of their speed on an idle machine (the demo:
1,700 samples/s against 5,700), so the policy here keeps OpenMP's default waiting and chooses
the **thread count** instead: the cores this process may use minus the cores other processes
kept busy over a short sample of ``/proc/stat`` at start-up. The choice holds for the whole
run: the thread count changes the order of float reductions, so a run is bit-reproducible for
a given count (``train.num_threads`` or ``OMP_NUM_THREADS`` pins it; a resumed run keeps the
count it started with).

**Freed memory.** glibc serves allocations above its mmap threshold (128 KiB at start, raised
dynamically up to 32 MiB) with a fresh ``mmap`` and returns them with ``munmap`` when freed. A
training step allocates and frees the same large tensors every time (attention weights of
32 × 200 × 200 floats, 5 MiB; the chunked cross-entropy's logits, 512 × 3,417 floats, 7 MiB),
so every step page-faults them in again. Raising the mmap threshold to its 32 MiB maximum and
the heap-trim threshold to 1 GiB lets the allocator reuse those pages, at the price of keeping
up to 1 GiB of freed heap resident. A SASRec+ step on ML-1M (2 threads) took 11 % less time
with it (390 against 438 ms, alternating A/B).

The CLI applies both (``configure_process``) before a command runs; ``train()`` and the other
library functions leave the process as the caller set it, and a library user opts in with one
call to ``configure_process()``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

_M_TRIM_THRESHOLD = -1  # glibc mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
#: how long the start-up sample of the other processes' CPU use lasts
SAMPLE_SECONDS = 0.1
#: a core counts as taken when other processes used more than this share of it
BUSY_SHARE = 0.5


@dataclass(frozen=True)
class ThreadChoice:
    threads: int  # torch intra-op threads
    cores: int  # cores this process may run on
    busy_elsewhere: float | None  # cores other processes kept busy at start (None: not sampled)
    chosen_by: str  # "measurement", "OMP_NUM_THREADS", "train.num_threads", "resumed run", ...

    def describe(self) -> str:
        line = f"{self.threads} thread(s) on {self.cores} core(s), chosen by {self.chosen_by}"
        if self.busy_elsewhere is not None:
            line += f" ({self.busy_elsewhere:.1f} core(s) busy with other work at start)"
        return line

    def to_json(self) -> dict:
        return asdict(self)


_chosen: ThreadChoice | None = None


def _cpu_ticks(cores: set[int]) -> tuple[int, int]:
    """(busy, total) jiffies summed over ``cores`` from ``/proc/stat``."""
    busy = total = 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cores:
            continue
        # user nice system idle iowait irq softirq steal
        values = [int(value) for value in fields[:8]]
        total += sum(values)
        busy += sum(values) - values[3] - values[4]
    return busy, total


def busy_elsewhere(seconds: float = SAMPLE_SECONDS) -> float | None:
    """Cores that other processes kept busy over ``seconds``; None where ``/proc`` is missing."""
    cores = os.sched_getaffinity(0)
    try:
        busy_before, total_before = _cpu_ticks(cores)
        own_before = sum(os.times()[:2])
        time.sleep(seconds)
        busy_after, total_after = _cpu_ticks(cores)
    except (OSError, ValueError):
        return None
    own = (sum(os.times()[:2]) - own_before) * os.sysconf("SC_CLK_TCK")
    elapsed = (total_after - total_before) / len(cores)  # jiffies per core over the sample
    if elapsed <= 0:
        return None
    return max(0.0, (busy_after - busy_before - own) / elapsed)


def choose_threads(requested: int | None = None) -> ThreadChoice:
    """The thread count for a run: ``requested``, else ``OMP_NUM_THREADS``, else the cores that
    were not busy with other processes over a short sample (at least one)."""
    cores = len(os.sched_getaffinity(0))
    if requested is not None:
        return ThreadChoice(requested, cores, None, "train.num_threads")
    pinned = os.environ.get("OMP_NUM_THREADS", "")
    if pinned.isdigit() and int(pinned) > 0:
        return ThreadChoice(int(pinned), cores, None, "OMP_NUM_THREADS")
    busy = busy_elsewhere()
    if busy is None:
        return ThreadChoice(cores, cores, None, "cores (no /proc/stat to sample)")
    taken = int(busy + 1 - BUSY_SHARE)  # a core is taken when more than BUSY_SHARE of it was used
    return ThreadChoice(max(1, cores - taken), cores, round(busy, 2), "measurement")


def use_threads(choice: ThreadChoice) -> ThreadChoice:
    """Make ``choice`` the process's thread count: torch's when torch is loaded, else through
    ``OMP_NUM_THREADS`` for the OpenMP and BLAS libraries loaded later."""
    global _chosen
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(choice.threads)
    else:
        os.environ["OMP_NUM_THREADS"] = str(choice.threads)
    _chosen = choice
    return choice


def chosen_threads() -> ThreadChoice | None:
    """The choice ``configure_process`` or ``use_threads`` made in this process, if any."""
    return _chosen


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's thresholds once per process; ``False`` where there is no glibc ``mallopt``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**30))


def configure_process(threads: int | None = None) -> ThreadChoice:
    """What the CLI does before a command: keep freed memory, and choose the thread count
    (``threads``, ``OMP_NUM_THREADS``, or the cores not busy elsewhere, sampled on the first
    call only). Returns the choice."""
    keep_freed_memory()
    if threads is None and _chosen is not None:  # measured once per process
        return use_threads(_chosen)
    return use_threads(choose_threads(threads))
