"""A bounded load test of ``attnsvm serve`` on loopback, micro-batching on and off in one run.

For each mode the script starts ``attnsvm serve RUN`` on a free loopback port, then for each
concurrency (default 1, 8, 32, 64) keeps that many requests in flight (closed loop: each client
sends its next request when the last one is answered) until a fixed number of requests
(``--requests``) is answered or ``--max-seconds`` passes. Every request is ``POST /recommend``
for a known user of the run (round-robin over its users), k = 10. Reported per level: requests
per second, p50 / p99 latency, errors (non-200 answers and failed connections), the server's
mean forward-pass size (``/health``) and its resident memory (``VmRSS``) after the level.

Targets (issue 25, the 2-core machine, ML-1M SASRec+): p99 under 50 ms at concurrency 8; at
concurrency 64 at least 3× the throughput of micro-batching off; zero errors; memory flat (the
RSS after the last level within 10 % of the RSS after the first). The load generator runs on
the same cores as the server (plain asyncio streams with pre-encoded requests, so that it costs
the server as little CPU as it can), so the numbers are a floor.

    # an ML-1M SASRec+ run (benchmarks/train_published.py sasrec+ makes the published one; a
    # short one is enough for the load test, which does not depend on accuracy):
    attnsvm train --model sasrec+ --data ml-1m --root ../shared/data --out /tmp/runs/ml1m-sasrec+ \\
        --set train.epochs=3
    python benchmarks/serve_load.py /tmp/runs/ml1m-sasrec+ --out /tmp/serve_load.json

    # a smoke run on any small run directory:
    python benchmarks/serve_load.py RUN --requests 50 --concurrency 1,8 --max-seconds 20

Only loopback addresses are ever contacted; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

import conditions
from attnsvm.serve.server import free_port

TARGET_P99_MS_AT_8 = 50.0
TARGET_SPEEDUP_AT_64 = 3.0
FLAT_MEMORY = 0.10


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(run: Path, micro_batching: bool, threads: int, wait_ms: float):
    port = free_port()
    command = [sys.executable, "-m", "attnsvm.cli.main", "serve", str(run), "--port", str(port)]
    command += ["--threads", str(threads), "--batch-wait-ms", str(wait_ms)]
    command += [] if micro_batching else ["--no-micro-batching"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {process.stderr.read().decode()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError("the server did not come up in 300 s")


def request_bytes(url: str, user: object) -> bytes:
    """One keep-alive ``POST /recommend`` for ``user``, k = 10, encoded once up front."""
    host = url.removeprefix("http://")
    body = json.dumps({"user": user, "k": 10}).encode()
    head = (
        f"POST /recommend HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def exchange(reader, writer, request: bytes) -> bool:
    """Send ``request`` on an open connection and read the whole answer; True when 200."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return head.startswith(b"HTTP/1.1 200")


async def level(url: str, users: list, concurrency: int, requests: int, max_seconds: float):
    """``requests`` answered (or ``max_seconds`` gone) with ``concurrency`` in flight.

    The clients speak HTTP/1.1 over plain asyncio streams with the requests encoded up front
    (one keep-alive connection each): a general client such as httpx spends about a
    millisecond of CPU per request, on the server's own two cores, which would measure the
    load generator rather than the server."""
    latencies: list[float] = []
    errors = 0
    issued = 0
    encoded = [request_bytes(url, user) for user in users]
    host, port = url.removeprefix("http://").split(":")
    deadline = time.perf_counter() + max_seconds

    async def client(index: int, warm: asyncio.Future) -> None:
        nonlocal issued, errors
        reader, writer = await asyncio.open_connection(host, int(port))
        await exchange(reader, writer, encoded[index % len(encoded)])  # warm the connection
        warm.set_result(True)
        await ready.wait()
        try:
            while issued < requests and time.perf_counter() < deadline:
                request = encoded[issued % len(encoded)]
                issued += 1
                start = time.perf_counter()
                try:
                    ok = await exchange(reader, writer, request)
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    ok = False
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, int(port))
                latencies.append(time.perf_counter() - start)
                errors += not ok
        finally:
            writer.close()

    ready = asyncio.Event()
    loop = asyncio.get_running_loop()
    warm = [loop.create_future() for _ in range(concurrency)]
    clients = [asyncio.ensure_future(client(i, warm[i])) for i in range(concurrency)]
    await asyncio.gather(*warm)  # every connection open and answered once
    start = time.perf_counter()
    ready.set()
    await asyncio.gather(*clients)
    seconds = time.perf_counter() - start
    milliseconds = np.array(latencies) * 1000
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "seconds": seconds,
        "rps": len(latencies) / seconds,
        "p50_ms": float(np.percentile(milliseconds, 50)),
        "p99_ms": float(np.percentile(milliseconds, 99)),
        "errors": errors,
    }


def run_mode(args, users: list, micro_batching: bool) -> list[dict]:
    process, url = start(args.run, micro_batching, args.threads, args.batch_wait_ms)
    rows = []
    try:
        for concurrency in args.concurrency:
            before = httpx.get(f"{url}/health").json()["batches"]
            row = asyncio.run(level(url, users, concurrency, args.requests, args.max_seconds))
            after = httpx.get(f"{url}/health").json()["batches"]
            passes = after["batches"] - before["batches"]
            row["mean_batch"] = (after["queries"] - before["queries"]) / max(passes, 1)
            row["rss_mib"] = rss_mib(process.pid)
            row["micro_batching"] = micro_batching
            rows.append(row)
            print(format_row(row), flush=True)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return rows


def format_row(row: dict) -> str:
    mode = "on " if row["micro_batching"] else "off"
    return (
        f"micro-batching {mode} c={row['concurrency']:>3}  {row['rps']:8.1f} req/s  "
        f"p50 {row['p50_ms']:7.2f} ms  p99 {row['p99_ms']:7.2f} ms  errors {row['errors']}  "
        f"mean batch {row['mean_batch']:5.1f}  RSS {row['rss_mib']:.0f} MiB  "
        f"({row['requests']} requests in {row['seconds']:.1f} s)"
    )


def verdicts(rows: list[dict]) -> dict[str, bool]:
    on = {r["concurrency"]: r for r in rows if r["micro_batching"]}
    off = {r["concurrency"]: r for r in rows if not r["micro_batching"]}
    checks = {"zero errors": all(r["errors"] == 0 for r in rows)}
    if 8 in on:
        checks[f"p99 < {TARGET_P99_MS_AT_8:.0f} ms at c=8"] = on[8]["p99_ms"] < TARGET_P99_MS_AT_8
    if 64 in on and 64 in off:
        speedup = on[64]["rps"] / off[64]["rps"]
        checks[f"c=64 on/off ≥ {TARGET_SPEEDUP_AT_64:.0f}× ({speedup:.2f}×)"] = (
            speedup >= TARGET_SPEEDUP_AT_64
        )
    for mode, levels in (("on", on), ("off", off)):
        if len(levels) > 1:
            memory = [r["rss_mib"] for r in levels.values()]
            checks[f"memory flat, micro-batching {mode}"] = memory[-1] <= memory[0] * (
                1 + FLAT_MEMORY
            )
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished run directory")
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--requests", type=int, default=2000, help="answered per level")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="cap per level")
    parser.add_argument("--threads", type=int, default=2, help="the server's torch threads")
    parser.add_argument("--batch-wait-ms", type=float, default=2.0)
    parser.add_argument("--modes", default="on,off", help="micro-batching modes to run")
    parser.add_argument("--out", type=Path, help="write the table as JSON")
    args = parser.parse_args()
    conditions.report()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    maps = json.loads((args.run / "id_maps.json").read_text())
    users = maps["users"]
    items = len(maps["items"]) - 1
    print(f"{args.run}: {len(users)} users, {items} items; load on {os.cpu_count()} cores")
    rows = []
    for mode in args.modes.split(","):
        rows += run_mode(args, users, micro_batching=mode == "on")
    checks = verdicts(rows)
    for name, passed in checks.items():
        print(f"{'PASS' if passed else 'FAIL'}  {name}")
    if args.out:
        args.out.write_text(
            json.dumps({"run": str(args.run), "rows": rows, "checks": checks}, indent=2)
        )


if __name__ == "__main__":
    main()
