"""LLM-judge throughput: against the local test server (default), or against vLLM's real server (--vllm).

Default mode: 256 calls at concurrency 32 against the local test server with 100 ms latency.

The ideal wall time is 256 / 32 × 0.1 s = 0.8 s (target: within 1.3×). The server
(``eapo.testing.judge_server``) runs in its own process, as a real judge endpoint would, so the
measured time is the client's: the judge's scheduling, the openai SDK and the HTTP transport. Each
row is one batch of 256 distinct prompts (no cache); "cold" includes opening the 32 connections,
"warm" is the median of three batches on open connections. Both SDK transports are shown side by side.
The last row is the floor of this server and transport: the same calls from a bare aiohttp client.
"client CPU" is this process's CPU time during the batch: the 32 answers of a wave arrive together
and are handled one after another, so on a busy CPU wall ≈ ideal + the CPU those handlings take.

    python bench/judge.py [--calls 256] [--concurrency 32] [--latency 0.1] [--in-process]

--vllm: vLLM's OpenAI-compatible server on SmolLM2-135M-Instruct (``eapo judge serve``'s settings;
started here unless --base-url names one), the judge's real requests (the response prompt, the JSON
schema, temperature 0): calls/s at concurrency 1, 8 and 32, for our client (LLMJudge, no cache) and for
a bare ``openai.AsyncOpenAI`` loop sending the same request bodies, and the ratio of the two. The
server started here runs without prefix caching, so the second client of a pair is not served from the
first one's cached prompts. Each level runs ``--rounds`` pairs back to back, alternating which client
goes first, and reports medians (a shared machine's load drifts), with each client's own CPU time per
call, which load does not move much. Greedy answers are the same for
both, so both make the server do the same work (the table says how many answers matched).

    python bench/judge.py --vllm [--base-url URL --model NAME] [--levels 1,8,32] [--calls-per-level 4,16,32]
                                 [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
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


QUESTIONS = [
    (
        "What helps a tension headache?",
        "Rest, hydration, ibuprofen or paracetamol; a doctor if it is sudden.",
    ),
    (
        "How should a mild ankle sprain be treated?",
        "Rest, ice, compression and elevation; walk when pain allows.",
    ),
    ("What lowers the risk of type 2 diabetes?", "Weight loss, regular exercise, a diet low in sugar."),
    (
        "When should a fever in an adult be seen by a doctor?",
        "Above 39.4 C, lasting over 3 days, or with a stiff neck.",
    ),
]
ANSWERS = [
    "Drink water and rest; ibuprofen if needed.",
    "See a doctor at once and avoid all food.",
    "Exercise regularly and keep a healthy weight; check blood sugar yearly.",
    "Take paracetamol, rest, and see a doctor if it lasts several days or is very high.",
]


def vllm_requests(count: int, tag: str) -> tuple[list[str], list[str], list[str]]:
    """``count`` distinct judge inputs (question, answer, reference) of the usual size."""
    questions, answers, references = [], [], []
    for index in range(count):
        question, reference = QUESTIONS[index % len(QUESTIONS)]
        questions.append(f"({tag} {index}) {question}")
        answers.append(f"<advice>{ANSWERS[(index // len(QUESTIONS)) % len(ANSWERS)]}</advice>")
        references.append(reference)
    return questions, answers, references


def ours(base_url: str, model: str, concurrency: int, inputs: tuple) -> tuple[float, float, list]:
    judge = LLMJudge(
        base_url=base_url,
        model=model,
        api_key_env=None,
        target="response",
        concurrency=concurrency,
        timeout=3600.0,
        max_retries=0,
        structured_output="json_schema",
    )
    try:
        cpu_start, start = time.process_time(), time.perf_counter()
        scores = judge(*inputs)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        judge.close()
    if None in scores:
        raise RuntimeError(f"our client left samples unscored: {judge.last_details}")
    ignore = ("response/judged", "response/cached")
    return (
        elapsed,
        cpu,
        [{k: v for k, v in detail.items() if k not in ignore} for detail in judge.last_details],
    )


def bare(base_url: str, model: str, concurrency: int, inputs: tuple) -> tuple[float, float, list]:
    """The same request bodies through a bare openai.AsyncOpenAI client, ``concurrency`` at a time."""
    import asyncio

    from eapo.rewards.judge import RESPONSE_DIMENSIONS, build_prompt, parse_scores, weighted_overall

    shaper = LLMJudge(base_url=base_url, model=model, api_key_env=None, structured_output="json_schema")
    bodies = [
        shaper.request_body(
            build_prompt("response", q, r, a.removeprefix("<advice>").removesuffix("</advice>")),
            RESPONSE_DIMENSIONS,
            "json_schema",
        )
        for q, a, r in zip(*inputs, strict=True)
    ]

    async def run() -> tuple[float, float, list]:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=3600.0)
        semaphore = asyncio.Semaphore(concurrency)

        async def one(body: dict) -> str:
            async with semaphore:
                response = await client.chat.completions.create(**body)
                return response.choices[0].message.content or ""

        cpu_start, start = time.process_time(), time.perf_counter()
        contents = await asyncio.gather(*(one(body) for body in bodies))
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        await client.close()
        details = []
        for content in contents:
            scores = parse_scores(content, RESPONSE_DIMENSIONS)
            details.append(
                {
                    **{f"response/{k}": v for k, v in scores.items()},
                    "response/overall": weighted_overall(scores, RESPONSE_DIMENSIONS),
                }
            )
        return elapsed, cpu, details

    return asyncio.run(run())


def vllm_main(args: argparse.Namespace) -> None:
    from contextlib import nullcontext

    from eapo.runtime.vllm_server import VLLMServer

    levels = [int(level) for level in args.levels.split(",")]
    calls = [int(count) for count in args.calls_per_level.split(",")]
    if len(calls) != len(levels):
        raise SystemExit("--calls-per-level needs one count per --levels entry")
    server = None
    if args.base_url is None:
        server = VLLMServer(
            "smollm2-135m-instruct",
            port=0,
            max_model_len=2048,
            extra_args=["--no-enable-prefix-caching"],
            log_path=args.server_log,
        )
    with server if server is not None else nullcontext():
        base_url = args.base_url or server.base_url
        model = args.model if args.base_url else server.served_model_name
        print(f"LLM judge against vLLM at {base_url} (model {model!r}); server log: {args.server_log}")
        ours(base_url, model, 1, vllm_requests(1, "warm-up"))  # loads the schema grammar, opens the path
        print(
            f"{'concurrency':>11}{'calls':>7}{'ours calls/s':>14}{'bare calls/s':>14}{'ours/bare':>11}"
            f"{'per round':>12}{'CPU ms/call ours':>18}{'bare':>7}{'same answers':>14}"
        )
        for level, count in zip(levels, calls, strict=True):
            inputs = vllm_requests(count, f"c{level}")
            rates: dict[str, list[float]] = {"ours": [], "bare": []}
            cpu: dict[str, list[float]] = {"ours": [], "bare": []}
            same, ratios = 0, []
            for round_index in range(args.rounds):
                order = [("ours", ours), ("bare", bare)]
                if round_index % 2:
                    order.reverse()  # alternate who goes first
                answers = {}
                for name, client in order:
                    seconds, cpu_seconds, answers[name] = client(base_url, model, level, inputs)
                    rates[name].append(count / seconds)
                    cpu[name].append(1000 * cpu_seconds / count)
                ratios.append(rates["ours"][-1] / rates["bare"][-1])
                same += sum(a == b for a, b in zip(answers["ours"], answers["bare"], strict=True))
            ours_rate, bare_rate = statistics.median(rates["ours"]), statistics.median(rates["bare"])
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
            print(
                f"{level:>11}{count:>7}{ours_rate:>14.3f}{bare_rate:>14.3f}{ours_rate / bare_rate:>11.3f}"
                f"{spread:>12}{statistics.median(cpu['ours']):>18.1f}{statistics.median(cpu['bare']):>7.1f}"
                f"{f'{same}/{count * args.rounds}':>14}",
                flush=True,
            )
        print(
            "calls/s: median over rounds; ours/bare: ratio of the medians; per round: min-max of the "
            "rounds' ratios (ours and bare back to back, alternating which goes first); CPU ms/call: this "
            "process's CPU time per call (the client's own cost; wall time is the server's and the machine's)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument(
        "--in-process", action="store_true", help="run the server on a thread of this process"
    )
    parser.add_argument("--vllm", action="store_true", help="against vLLM's real server (see the docstring)")
    parser.add_argument("--base-url", default=None, help="--vllm: a running server (default: start one)")
    parser.add_argument("--model", default="judge", help="--vllm with --base-url: the served model name")
    parser.add_argument("--levels", default="1,8,32", help="--vllm: concurrency levels")
    parser.add_argument("--calls-per-level", default="4,16,32", help="--vllm: calls at each level")
    parser.add_argument("--rounds", type=int, default=3, help="--vllm: ours-then-bare pairs per level")
    parser.add_argument(
        "--server-log", default="vllm-judge-bench.log", help="--vllm: the started server's log"
    )
    args = parser.parse_args()
    if args.vllm:
        vllm_main(args)
        return
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
