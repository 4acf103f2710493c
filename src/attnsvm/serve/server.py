"""Running the app: ``serve(run_dir, …)`` loads the run and hands the app to uvicorn.

One worker process (the default) holds one copy of the model and micro-batches every request
itself. ``workers > 1`` starts that many uvicorn worker processes, each loading the run (through
``app.app_from_environment``): throughput for a model small enough to copy, at the price of
batches split between processes.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnsvm.errors import InvalidRequest
from attnsvm.rec.config_base import Range

LOOPBACK = "127.0.0.1"
#: where each numeric option may lie; the CLI's ``serve`` and ``explore`` options take the same
#: ranges (``cli/options.py``)
RANGES: dict[str, Range] = {
    "port": Range(0, 65535),  # 0: a free port the system picks
    "workers": Range(1, 4096),
    "max_batch": Range(1, 2**31 - 1),
    "max_wait_ms": Range(0, 1000),
    "threads": Range(1, 4096),  # as train.num_threads
}


@dataclass(frozen=True)
class ServeOptions:
    host: str = LOOPBACK
    port: int = 8000
    workers: int = 1
    micro_batching: bool = True
    max_batch: int = 64
    max_wait_ms: float = 2.0
    threads: int | None = None  # torch intra-op threads per worker (default: attnsvm.process)
    access_log: bool = False
    # item titles instead of those found beside the run's data: a file, read through
    # title_columns where given (``attnsvm.rec.data.titles.read_item_titles``)
    titles: Path | None = None
    title_columns: str | None = None

    def check(self) -> None:
        for name, allowed in RANGES.items():
            value = getattr(self, name)
            if value is not None and value not in allowed:  # NaN lies in no range
                raise InvalidRequest(f"{name} must lie in {allowed}, got {value}")
        if self.title_columns is not None and self.titles is None:
            raise InvalidRequest("title columns go with a titles file (--titles FILE)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_port(host: str = LOOPBACK) -> int:
    """A port nobody listens on right now (for tests and benchmarks)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def serve(
    run_dir: str | Path,
    options: ServeOptions = ServeOptions(),
    announce: Callable[[str], None] = print,
) -> None:
    """Serve ``run_dir`` until interrupted (see the module docstring)."""
    import uvicorn

    from attnsvm.rec.data.item_titles import match_catalogue
    from attnsvm.rec.data.titles import read_item_titles
    from attnsvm.rec.train.checkpoint import finished_run, read_id_maps

    options.check()
    run_dir = Path(run_dir).resolve()
    titles = None
    if options.titles is not None:
        # read and matched to the run's items before any worker starts: a titles file that
        # does not fit is one error, not one crashed worker after another
        titles = read_item_titles(options.titles, options.title_columns)
        match_catalogue(titles, read_id_maps(finished_run(run_dir))["items"])
    common = {
        "host": options.host,
        "port": options.port,
        "log_level": "warning",
        "access_log": options.access_log,
    }
    where = f"http://{options.host}:{options.port}"
    if not is_loopback(options.host):
        announce(f"warning: listening on {options.host}, not loopback: reachable from the network")
    if options.threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(options.threads)  # for worker processes
    if options.workers == 1:
        import torch

        from attnsvm.serve.app import create_app
        from attnsvm.serve.engine import Recommender

        if options.threads is not None:
            torch.set_num_threads(options.threads)
        app = create_app(
            Recommender(run_dir, titles),
            micro_batching=options.micro_batching,
            max_batch=options.max_batch,
            max_wait=options.max_wait_ms / 1000,
        )
        announce(f"serving {run_dir.name} on {where} (explorer: {where}/, API: {where}/docs)")
        uvicorn.run(app, **common)
        return
    if options.titles is not None:
        os.environ["ATTNSVM_SERVE_TITLES"] = str(options.titles.resolve())
        if options.title_columns is not None:
            os.environ["ATTNSVM_SERVE_TITLE_COLUMNS"] = options.title_columns
    os.environ.update(
        ATTNSVM_SERVE_RUN=str(run_dir),
        ATTNSVM_SERVE_MICRO_BATCHING="1" if options.micro_batching else "0",
        ATTNSVM_SERVE_MAX_BATCH=str(options.max_batch),
        ATTNSVM_SERVE_MAX_WAIT=str(options.max_wait_ms / 1000),
    )
    announce(f"serving {run_dir.name} on {where} with {options.workers} workers")
    uvicorn.run(
        "attnsvm.serve.app:app_from_environment", factory=True, workers=options.workers, **common
    )
