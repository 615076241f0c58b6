"""Load on `madmax web`: rounds of N concurrent POST /simulate requests to a local server.

Starts `python -m madmax web --no-browser` on a free port, then sends `--rounds` rounds of `--requests`
requests at once (a mix of four training and serving cases), and reports per round the throughput, the
latency percentiles, the answers by status code and the server's memory (RSS of the server and its worker
processes) before and after. With --markdown, writes the table into docs/web.md between its markers.

    python benchmarks/web_load.py [--requests 200] [--rounds 3] [--workers 4] [--markdown docs/web.md]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import httpx

CASES = [
    {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 64, "strategy": "tp=2"},
    {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 16, "global_batch": 64, "strategy": "tp=2,pp=2"},
    {"model": "llama-2-7b", "system": "dgx-a100", "num_gpus": 8, "global_batch": 32},
    {"model": "llama-3-8b", "system": "dgx-h100", "num_gpus": 1, "task": "inference", "prompt_len": 512,
     "output_len": 64, "batch": 8},
]
MARKERS = ("<!-- web_load:start -->", "<!-- web_load:end -->")
STARTUP_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        stack.extend(children.get(p, []))
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        total += int(match.group(1)) * 1024 if match else 0
    return total


async def round_of(base: str, n: int) -> dict:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=600) as client:
        async def one(i: int) -> tuple[float, int]:
            t0 = time.perf_counter()
            response = await client.post("/simulate", json=CASES[i % len(CASES)])
            return time.perf_counter() - t0, response.status_code

        start = time.perf_counter()
        answers = await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - start
    latencies = sorted(t for t, _ in answers)
    return {"wall_s": wall, "throughput": n / wall, "p50_s": statistics.median(latencies),
            "p99_s": latencies[max(0, round(0.99 * n) - 1)], "max_s": latencies[-1],
            "codes": Counter(code for _, code in answers)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="concurrent requests per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4, help="the server's simulation processes")
    parser.add_argument("--markdown", type=Path, help="write the table into this page between its markers")
    args = parser.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "madmax", "web", "--no-browser", "--port", str(port),
                               "--workers", str(args.workers), "--data-dir", "/tmp/madmax-web-load"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.2)
        rss_start = tree_rss_bytes(server.pid)
        rows = []
        for r in range(args.rounds):
            before = tree_rss_bytes(server.pid)
            stats = asyncio.run(round_of(base, args.requests))
            after = tree_rss_bytes(server.pid)
            alive = urllib.request.urlopen(f"{base}/health", timeout=5).status == 200
            rows.append({**stats, "round": r + 1, "rss_before": before, "rss_after": after, "alive": alive})
            codes = ", ".join(f"{n} x {code}" for code, n in sorted(stats["codes"].items()))
            print(f"round {r + 1}: {args.requests} concurrent requests in {stats['wall_s']:.2f} s = "
                  f"{stats['throughput']:.1f} req/s; latency p50 {stats['p50_s']:.2f} s, p99 {stats['p99_s']:.2f} s; "
                  f"{codes}; RSS {before / 2**20:,.0f} -> {after / 2**20:,.0f} MiB; up: {alive}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    if args.markdown:
        write_markdown(args.markdown, rows, args, rss_start)


def write_markdown(path: Path, rows: list[dict], args: argparse.Namespace, rss_start: int) -> None:
    lines = [MARKERS[0],
             f"`python benchmarks/web_load.py --requests {args.requests} --rounds {args.rounds} --workers "
             f"{args.workers} --markdown {path}` on {os.cpu_count()} CPUs ({platform.machine()}, "
             f"Python {platform.python_version()}), the server with {args.workers} simulation processes (RSS "
             f"{rss_start / 2**20:,.0f} MiB before the first request, when none has started). Requests cycle through "
             "four cases (three training, one serving); RSS is the server's with all its processes, and a "
             "simulation process is replaced after 200 simulations.",
             "",
             "| round | requests | wall s | requests/s | p50 latency s | p99 latency s | answers | RSS before MiB "
             "| RSS after MiB | server up |",
             "|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    for r in rows:
        codes = ", ".join(f"{n} x {code}" for code, n in sorted(r["codes"].items()))
        lines.append(f"| {r['round']} | {args.requests} | {r['wall_s']:.2f} | {r['throughput']:.1f} | {r['p50_s']:.2f} "
                     f"| {r['p99_s']:.2f} | {codes} | {r['rss_before'] / 2**20:,.0f} | {r['rss_after'] / 2**20:,.0f} "
                     f"| {'yes' if r['alive'] else 'no'} |")
    lines.append(MARKERS[1])
    text = path.read_text(encoding="utf-8")
    start, end = text.find(MARKERS[0]), text.find(MARKERS[1])
    if start < 0 or end < 0:
        raise SystemExit(f"{path} has no {MARKERS[0]} ... {MARKERS[1]} block to fill")
    path.write_text(text[:start] + "\n".join(lines) + text[end + len(MARKERS[1]):], encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
