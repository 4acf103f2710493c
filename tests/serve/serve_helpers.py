"""Helpers of the server tests: the tiny walks data with titles, and starting a real server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from attnsvm.serve.server import free_port

NUM_ITEMS = 30


def write_walks(folder: Path, num_users: int = 120, seed: int = 0) -> Path:
    """``user i1 i2 …`` lines (a random start, then +3 per step) and a ``movies.dat`` of titles
    beside them, where ``find_titles`` looks."""
    rng = np.random.default_rng(seed)
    lines = []
    for user in range(num_users):
        length, start = rng.integers(5, 12), rng.integers(NUM_ITEMS)
        items = [(start + 3 * step) % NUM_ITEMS + 1 for step in range(length)]
        lines.append(" ".join(map(str, [user + 100, *items])))
    (folder / "walks.txt").write_text("\n".join(lines) + "\n")
    titles = "".join(f"{i}::Film number {i} ({1970 + i})::Drama\n" for i in range(1, NUM_ITEMS + 1))
    (folder / "movies.dat").write_text(titles)
    return folder / "walks.txt"


def start_server(run_dir: Path, *options: str) -> tuple[subprocess.Popen, str]:
    """``attnsvm serve RUN_DIR`` on a free loopback port; returns once ``/health`` answers."""
    port = free_port()
    command = [sys.executable, "-m", "attnsvm.cli.main", "serve", str(run_dir)]
    command += ["--port", str(port), "--threads", "1", *options]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {process.stdout.read()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the server did not answer /health within 120 s")
