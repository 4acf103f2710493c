"""Process-wide settings: how torch's threads wait and how many there are, and how freed memory
is kept.

**Waiting.** torch's OpenMP pool (GNU libgomp) keeps a finished thread spinning for work for a
long while (``GOMP_SPINCOUNT``, 300,000 iterations by default) before it sleeps. When other
processes want the cores, a spinning thread holds a core its sibling needs and every parallel
region waits for the descheduled one. Beside one busy core, SASRec+ on ML-1M trained at 161
samples/s with torch's defaults against 561 idle (``benchmarks/train_contention.py``); in ad-hoc
runs with more work around (load average 4.5) a 3-step epoch at 2 threads took 52 s against
1.7 s at one thread, and 1.8-2.2 s at two threads with the spin cut to 0-1,000 iterations
(``OMP_WAIT_POLICY=PASSIVE`` is 0). Not spinning at all costs small models on an idle machine
(ad hoc: the demo's model at 1,700 samples/s against 5,700), so the CLI sets a short spin,
``SPIN_COUNT`` iterations, unless the user set ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY``.
libgomp reads it once, when torch loads it, so it only takes effect when set before
``import torch``.

**Thread count.** The cores this process may use minus the cores other processes kept busy
over a short sample of ``/proc/stat`` at start-up (``OMP_NUM_THREADS`` or ``train.num_threads``
pin it). The choice holds for the whole run: the thread count changes the order of float
reductions, so a run is bit-reproducible for a given count (a resumed run keeps the count it
started with). ``benchmarks/train_contention.py`` measures both beside a busy core.

**Freed memory.** glibc serves allocations above its mmap threshold (128 KiB at start, raised
dynamically up to 32 MiB) with a fresh ``mmap`` and returns them with ``munmap`` when freed. A
training step allocates and frees the same large tensors every time (attention weights of
32 × 200 × 200 floats, 5 MiB; the chunked cross-entropy's logits, 512 × 3,417 floats, 7 MiB),
so every step page-faults them in again. Raising the mmap threshold to its 32 MiB maximum and
the heap-trim threshold to 1 GiB lets the allocator reuse those pages, at the price of keeping
up to 1 GiB of freed heap resident. A SASRec+ step on ML-1M (2 threads) took 11 % less time
with it (390 against 438 ms, alternating A/B).

**Who applies them.** The CLI applies all three (``configure_process``) before a command
imports torch. The library applies the same policy itself, so a notebook trains as fast as the
CLI: importing ``attnsvm.rec`` sets the short spin (the last moment it can act: every module
there imports torch), and the entry points that train or load a run (``train()``,
``Recommender.fit``, ``load_run`` under ``Recommender.load``, ``recommend`` and the server)
call ``configure_unless_chosen()``: the thread count and the allocator, unless the caller chose
the threads already (``callers_choice``: ``configure_process`` or ``use_threads`` called, or
torch's count changed with ``torch.set_num_threads``; ``OMP_NUM_THREADS`` pins the measured
count as for the CLI). ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` set, or torch imported before
``attnsvm.rec``, leave the spin to the caller.
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
from typing import NoReturn

_M_TRIM_THRESHOLD = -1  # glibc mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
#: how long the start-up sample of the other processes' CPU use lasts
SAMPLE_SECONDS = 0.1
#: a core counts as taken when other processes used more than this share of it
BUSY_SHARE = 0.5
#: libgomp's spin before a waiting thread sleeps (see the module docstring)
SPIN_COUNT = 1000


@dataclass(frozen=True)
class ThreadChoice:
    threads: int  # torch intra-op threads
    cores: int  # cores this process may run on
    busy_elsewhere: float | None  # cores other processes kept busy at start (None: not sampled)
    chosen_by: str  # "measurement", "OMP_NUM_THREADS", "train.num_threads", "resumed run", ...
    waiting: str = ""  # how idle OpenMP threads wait (``openmp_waiting``)

    def describe(self) -> str:
        line = f"{self.threads} thread(s) on {self.cores} core(s), chosen by {self.chosen_by}"
        if self.busy_elsewhere is not None:
            line += f" ({self.busy_elsewhere:.1f} core(s) busy with other work at start)"
        return line + (f"; OpenMP waiting: {self.waiting}" if self.waiting else "")

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


def openmp_waiting() -> str:
    """How idle OpenMP threads wait in this process, in words (for the logs)."""
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        if name in os.environ:
            return f"{name}={os.environ[name]}"
    return "libgomp's default spin (300,000)"


def short_spin() -> str:
    """Set ``GOMP_SPINCOUNT=SPIN_COUNT`` unless the user chose a wait policy or torch (and its
    libgomp) is already loaded; returns the waiting in force."""
    if "torch" not in sys.modules and not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(os.environ):
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    return openmp_waiting()


def choose_threads(requested: int | None = None) -> ThreadChoice:
    """The thread count for a run: ``requested``, else ``OMP_NUM_THREADS``, else the cores that
    were not busy with other processes over a short sample (at least one)."""
    cores = len(os.sched_getaffinity(0))
    waiting = openmp_waiting()
    if requested is not None:
        return ThreadChoice(requested, cores, None, "train.num_threads", waiting)
    pinned = os.environ.get("OMP_NUM_THREADS", "")
    if pinned.isdigit() and int(pinned) > 0:
        return ThreadChoice(int(pinned), cores, None, "OMP_NUM_THREADS", waiting)
    busy = busy_elsewhere()
    if busy is None:
        return ThreadChoice(cores, cores, None, "cores (no /proc/stat to sample)", waiting)
    taken = int(busy + 1 - BUSY_SHARE)  # a core is taken when more than BUSY_SHARE of it was used
    return ThreadChoice(max(1, cores - taken), cores, round(busy, 2), "measurement", waiting)


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


def _physical_cores(cpus: set[int]) -> int:
    """Physical cores among ``cpus`` (hyperthread siblings counted once); ``len(cpus)`` where
    sysfs does not say."""
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            cores.add((package, (topology / "core_id").read_text().strip()))
        except OSError:
            return len(cpus)
    return len(cores)


def torch_default_threads() -> int:
    """The thread count torch starts with (its x86 builds, through MKL): the physical cores this
    process may run on, capped by ``MKL_NUM_THREADS``, else by ``OMP_NUM_THREADS``."""
    cores = _physical_cores(os.sched_getaffinity(0))
    for name in ("MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return min(cores, int(value))
    return cores


def callers_choice() -> ThreadChoice | None:
    """The thread count already chosen in this process, if any: by ``configure_process`` or
    ``use_threads`` (the CLI's, the caller's, or an earlier entry point's), or by the caller's
    ``torch.set_num_threads`` (torch's count is not the one it started with, nor the one chosen
    here). None: nobody chose."""
    torch = sys.modules.get("torch")
    current = None if torch is None else torch.get_num_threads()
    if _chosen is not None and current in (None, _chosen.threads):
        return _chosen
    expected = torch_default_threads() if _chosen is None else _chosen.threads
    if current is None or current == expected:
        return None
    cores = len(os.sched_getaffinity(0))
    return ThreadChoice(current, cores, None, "the caller (torch's setting)", openmp_waiting())


def configure_unless_chosen() -> ThreadChoice:
    """What the library's entry points call: ``configure_process()``, unless the caller chose the
    threads (``callers_choice``); returns the choice in force."""
    chosen = callers_choice()
    return chosen if chosen is not None else configure_process()


def configure_process(threads: int | None = None) -> ThreadChoice:
    """What the CLI does before a command: a short OpenMP spin (before torch loads), keep
    freed memory, and choose the thread count (``threads``, ``OMP_NUM_THREADS``, or the cores
    not busy elsewhere, sampled on the first call only). Returns the choice."""
    short_spin()
    keep_freed_memory()
    if threads is None and _chosen is not None:  # measured once per process
        return use_threads(_chosen)
    return use_threads(choose_threads(threads))


def exit_without_teardown(code: int) -> NoReturn:
    """Leave now with ``code``, output flushed, skipping the interpreter's teardown: what a
    ``torchrun`` process does once its work is written. Under load a gloo thread can abort that
    teardown ("terminate called without an active exception", SIGABRT), and torchrun then
    reports a finished run as failed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
