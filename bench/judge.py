"""LLM-judge throughput: 256 calls at concurrency 32 against the local test server with 100 ms latency.

The ideal wall time is 256 / 32 × 0.1 s = 0.8 s (target: within 1.3×). The server
(``eapo.testing.judge_server``) runs in its own process, as a real judge endpoint would, so the
measured time is the client's: the judge's scheduling, the openai SDK and the HTTP transport. Each
row is one batch of 256 distinct prompts (no cache); "cold" includes opening the 32 connections,
"warm" is the median of three batches on open connections. Both SDK transports are shown side by side.
The last row is the floor of this server and transport: the same calls from a bare aiohttp client.
"client CPU" is this process's CPU time during the batch: the 32 answers of a wave arrive together
and are handled one after another, so on a busy CPU wall ≈ ideal + the CPU those handlings take.

    python bench/judge.py [--calls 256] [--concurrency 32] [--latency 0.1] [--in-process]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import openai  # noqa: F401  (imported up front, so the cold batch times connections, not the import)

from eapo.rewards.judge import LLMJudge

COMPLETION = (
    "<think>Epigastric pain after meals, relieved by antacids: likely gastritis.</think><advice>PPI.</advice>"
)


@contextmanager
def judge_endpoint(latency: float, in_process: bool) -> Iterator[str]:
    if in_process:
        from eapo.testing import JudgeServer

        with JudgeServer(latency=latency) as server:
            yield server.base_url
        return
    command = [
        sys.executable,
        "-m",
        "eapo.testing.judge_server",
        "--latency",
        str(latency),
        "--exit-on-stdin-eof",
    ]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        if not base_url.startswith("http"):
            raise RuntimeError(f"the judge server did not start (printed {base_url!r})")
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=10)


def one_batch(judge: LLMJudge, calls: int, tag: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) for one batch of ``calls`` distinct prompts."""
    before = judge.stats["requests"]
    cpu_start, start = time.process_time(), time.perf_counter()
    scores = judge(
        [f"question {index} ({tag})" for index in range(calls)], [COMPLETION] * calls, ["gastritis"] * calls
    )
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if any(score is None for score in scores) or judge.stats["requests"] - before != calls:
        raise RuntimeError(
            f"batch {tag}: expected {calls} scored requests, got {judge.stats} and {scores[:4]}…"
        )
    return elapsed, cpu


def raw_floor(base_url: str, calls: int, concurrency: int) -> tuple[float, float]:
    """The same calls with a bare aiohttp client (no SDK, no parsing): the server + transport floor."""
    import asyncio

    import aiohttp

    from eapo.rewards.judge import build_prompt

    async def run() -> tuple[float, float]:
        async with aiohttp.ClientSession() as session:
            semaphore = asyncio.Semaphore(concurrency)

            async def one(index: int, tag: str) -> None:
                body = {
                    "model": "test-judge",
                    "messages": [
                        {"role": "user", "content": build_prompt("think", f"q{index} {tag}", "ref", "r")}
                    ],
                }
                async with semaphore, session.post(f"{base_url}/chat/completions", json=body) as response:
                    await response.json()

            await asyncio.gather(*(one(index, "warm-up") for index in range(calls)))
            cpu_start, start = time.process_time(), time.perf_counter()
            await asyncio.gather(*(one(index, "timed") for index in range(calls)))
            return time.perf_counter() - start, time.process_time() - cpu_start

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument(
        "--in-process", action="store_true", help="run the server on a thread of this process"
    )
    args = parser.parse_args()
    ideal = -(-args.calls // args.concurrency) * args.latency
    where = "a thread of this process" if args.in_process else "a separate process"
    print(
        f"LLM judge: {args.calls} calls, server latency {args.latency * 1000:.0f} ms, concurrency {args.concurrency}; "
        f"ideal {ideal:.3f} s (server in {where})"
    )
    print(
        f"{'transport':<10}{'batch':<14}{'wall (s)':>10}{'x ideal':>10}{'calls/s':>10}{'client CPU (s)':>16}"
    )
    results: dict[str, float] = {}
    with judge_endpoint(args.latency, args.in_process) as base_url:
        for backend in ("aiohttp", "httpx"):
            judge = LLMJudge(
                base_url=base_url,
                model="test-judge",
                api_key_env=None,
                concurrency=args.concurrency,
                timeout=10.0,
                http_backend=backend,
            )
            try:
                cold = one_batch(judge, args.calls, f"{backend} cold")
                warm = [one_batch(judge, args.calls, f"{backend} warm {i}") for i in range(3)]
            finally:
                judge.close()
            median_run = sorted(warm)[len(warm) // 2]
            rows = [("cold", cold)] + [(f"warm {i + 1}", run) for i, run in enumerate(warm)]
            rows.append(("warm median", median_run))
            for label, (seconds, cpu) in rows:
                print(
                    f"{backend:<10}{label:<14}{seconds:>10.3f}{seconds / ideal:>10.2f}"
                    f"{args.calls / seconds:>10.0f}{cpu:>16.3f}"
                )
            results[backend] = median_run[0]
        floor, floor_cpu = raw_floor(base_url, args.calls, args.concurrency)
        print(
            f"{'floor':<10}{'bare aiohttp':<14}{floor:>10.3f}{floor / ideal:>10.2f}"
            f"{args.calls / floor:>10.0f}{floor_cpu:>16.3f}   (no SDK: server + transport only)"
        )
    ratio = results["aiohttp"] / ideal
    print(
        f"target: default transport (aiohttp) warm median within 1.3x ideal: {'PASS' if ratio <= 1.3 else 'FAIL'} "
        f"({ratio:.2f}x); httpx {results['httpx'] / ideal:.2f}x"
    )


if __name__ == "__main__":
    main()
