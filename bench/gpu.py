"""Rollout throughput, full step time and peak memory of each rollout backend on one GPU.

SmolLM2-135M-Instruct (the embedded weights), 48 MedQuAD prompts x N = 4 samples, 256 new tokens
(the demo prompts when $EAPO_DATA_DIR has no MedQuAD). For every backend available:

* rollout tokens/s: generated tokens (up to and including EOS) / wall time of one batched call, the
  median over ``--repeats`` calls after one untimed warm-up call (whose time is printed too: the
  paged generation, as TRL calls it, warms up on *every* call, so its timed calls include that);
* full step time: ``--steps`` optimisation steps of the real recipe (``eapo.train.run``: generate +
  score + entropy + update, EAPO), the first one untimed; the median of the rest;
* peak GPU memory (``torch.cuda.max_memory_allocated``) of each measurement;
* the floor of each (bench/roofline.py): the device's matmul rate and memory bandwidth measured at the
  start of the same run, each phase's FLOPs and bytes counted from the model's shapes and the real
  token counts, the floor the larger of the two; ``x floor`` = time / floor.

Ratios are against plain ``generate`` measured in the same run. Targets: >= 20,000 rollout tokens/s
and >= 10x plain generate.

``--model random:qwen2.5-0.5b`` measures at Qwen2.5-0.5B's size without its weights;
``--config configs/gpu_check.yaml --check`` asserts the step runs' losses are finite and their
``eapo/*`` metrics follow w+ = clip(w0 H_t / H_0, w_min, w_max) (scripts/gpu_check.sh);
``--markdown OUT.md`` writes the tables.

Backends: ``generate`` (model.generate), ``static`` (generate + static KV cache + compiled decoding),
``paged`` (transformers continuous batching), ``vllm`` (when installed).

    python bench/gpu.py [--backends generate,static,paged,vllm] [--prompts 48] [--generations 4]
                        [--new-tokens 256] [--repeats 3] [--steps 4] [--step-backends generate,paged]
                        [--dtype auto] [--model NAME] [--config CONFIG] [--check]
                        [--runs-dir DIR] [--json OUT.json] [--markdown OUT.md]

Without CUDA it prints why and exits 0 (``--allow-cpu`` runs it anyway, e.g. with ``--model tiny``,
to check the script itself).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
BACKENDS = ("generate", "static", "paged", "vllm")
TARGET_TOKENS_PER_S = 20_000
TARGET_SPEEDUP = 10.0


def _cuda():
    import torch

    return torch.cuda.is_available()


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**30


def load_prompts(model_path: str, count: int, max_prompt_tokens: int) -> tuple[list[str], str]:
    """``count`` rendered prompts: MedQuAD train questions when present, else the bundled demo set."""
    from eapo.data import default_prompt_for, load, render_prompts
    from eapo.runtime.models import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    try:
        records, name = load("medquad", split="train", limit=count), "medquad"
    except Exception:  # noqa: BLE001 - no MedQuAD here: the bundled demo set
        records, name = load("demo", split="all"), "demo"
    records = (records * (count // max(len(records), 1) + 1))[:count]
    prompts = render_prompts(
        records, tokenizer, prompt=default_prompt_for(name), max_prompt_tokens=max_prompt_tokens
    )
    return list(prompts), name


def make_backend(backend: str, model_path: str, dtype: str):
    from eapo.runtime.generate import PagedGenerator, TransformersGenerator, VLLMGenerator

    if backend == "generate":
        return TransformersGenerator(model_path, dtype=dtype)
    if backend == "static":
        return TransformersGenerator(model_path, dtype=dtype, cache_implementation="static", compile=True)
    if backend == "paged":
        return PagedGenerator(model_path, dtype=dtype, options={"max_memory_percent": 0.5})
    if backend == "vllm":
        return VLLMGenerator(model_path, dtype=dtype, gpu_memory_utilization=0.5)
    raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")


def _shapes(model_path: str, dtype: str):
    from transformers import AutoConfig

    from roofline import Shapes

    bytes_per = 2 if dtype in ("bfloat16", "float16") else 4
    return Shapes(AutoConfig.from_pretrained(model_path), weight_bytes=bytes_per)


def _prompt_lengths(model_path: str, prompts: list[str]) -> list[int]:
    from eapo.runtime.models import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    return [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]


def bench_rollout(backend: str, model_path: str, prompts: list[str], args) -> dict[str, Any]:
    """Tokens/s of one batched call (all prompts x N), median over repeats after a warm-up call."""
    _reset_peak()
    started = time.perf_counter()
    generator = make_backend(backend, model_path, args.dtype)
    load_s = time.perf_counter() - started
    kwargs = dict(k=args.generations, temperature=1.0, top_p=1.0, max_new_tokens=args.new_tokens)

    lengths: list[list[int]] = []

    def call(seed: int) -> tuple[float, int]:
        begin = time.perf_counter()
        groups = generator.generate(prompts, seed=seed, **kwargs)
        if _cuda():
            import torch

            torch.cuda.synchronize()
        lengths.append([c.num_tokens for group in groups for c in group])
        return time.perf_counter() - begin, sum(c.num_tokens for group in groups for c in group)

    warmup_s, _ = call(0)
    timed = [call(seed) for seed in range(1, args.repeats + 1)]
    rates = [tokens / seconds for seconds, tokens in timed]
    floors = []
    if args.ceilings is not None:
        rows = [n for n in args.prompt_lengths for _ in range(args.generations)]
        floors = [
            args.shapes.generation_floor(rows, completion, args.generations, args.ceilings)["floor_s"]
            for completion in lengths[1:]
        ]
    result = {
        "tokens_per_s": statistics.median(rates),
        "tokens_per_call": statistics.median(tokens for _, tokens in timed),
        "seconds_per_call": statistics.median(seconds for seconds, _ in timed),
        "warmup_call_s": warmup_s,
        "load_s": load_s,
        "mean_length": statistics.mean(tokens for _, tokens in timed) / (len(prompts) * args.generations),
        "peak_gib": _peak_gib(),
        "calls_timed": len(timed),
        "floor_s": statistics.median(floors) if floors else None,
        "x_floor": statistics.median(
            seconds / floor for (seconds, _), floor in zip(timed, floors, strict=True)
        )
        if floors
        else None,
    }
    generator = None  # free the backend before the next one loads
    import gc

    gc.collect()
    return result


def bench_steps(backend: str, args, data_name: str, out: Path) -> dict[str, Any]:
    """``--steps`` steps of the real recipe (EAPO) with this backend; the first step is a warm-up."""
    from eapo.config import load_config
    from eapo.train import run

    backend_overrides = {
        "generate": ["rollout.backend=generate"],
        "static": ["rollout.backend=generate", "rollout.cache_implementation=static", "rollout.compile=true"],
        "paged": ["rollout.backend=paged", "rollout.paged_options={max_memory_percent: 0.5}"],
        "vllm": ["rollout.backend=vllm", "rollout.vllm_gpu_memory_utilization=0.3"],
    }[backend]
    import yaml

    from eapo.config import read_config_tree, resolve_config

    tree = read_config_tree(resolve_config(str(args.config or ROOT / "configs" / "study.yaml")))
    tree.pop("study", None)  # a study config's training part
    tree.pop("output_dir", None)
    base = out / f"{backend}-base.yaml"
    base.parent.mkdir(parents=True, exist_ok=True)
    base.write_text(yaml.safe_dump(tree), encoding="utf-8")
    config = load_config(
        base,
        [
            f"model.name_or_path={args.model}",
            f"model.dtype={args.dtype}",
            f"data.name={data_name}",
            f"data.split={'train' if data_name == 'medquad' else 'all'}",
            f"data.limit={args.prompts * max(args.steps, 1)}",
            f"data.max_prompt_tokens={args.max_prompt_tokens}",
            f"rollout.num_generations={args.generations}",
            f"rollout.max_completion_tokens={args.new_tokens}",
            f"train.prompts_per_step={args.prompts}",
            f"train.micro_batch_size={args.micro_batch_size}",
            f"train.max_steps={args.steps}",
            "train.save_steps=0",
            "algorithm.method=eapo",
            "logging.plot=false",
            "logging.progress=false",
            "logging.tensorboard=false",
            *backend_overrides,
            *args.overrides,
        ],
    )
    _reset_peak()
    from step_timer import StepTimer

    timer = StepTimer()
    started = time.perf_counter()
    run_dir = run(config, out / backend, callbacks=[timer])
    total = time.perf_counter() - started
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    timed = timer.times[1:] or timer.times
    from eapo.run_dir import read_metrics

    rows = read_metrics(run_dir)
    check = check_metrics(rows, config) if args.check else None
    floor = step_floor(rows[1:] or rows, config, args) if args.ceilings is not None else None
    return {
        "run_dir": str(run_dir),
        "check": check,
        "floor": floor,
        "x_floor": statistics.median(timed) / floor["floor_s"] if floor else None,
        "losses": [row.get("loss") for row in rows],
        "median_step_s": statistics.median(timed),
        "first_step_s": timer.times[0] if timer.times else None,
        "steps_timed": len(timed),
        "total_s": total,
        "peak_gib": _peak_gib(),
        "backend_ran": summary.get("rollout/backend"),
        "rollout": summary.get("rollout"),
        "completion_mean_length": (summary.get("final_metrics") or {}).get("completion/mean_length"),
    }


def check_metrics(rows: list[dict[str, Any]], config) -> dict[str, Any]:
    """Every step logged, losses finite, and the ``eapo/*`` metrics the rule's: H_0 the first step's
    rollout entropy, w+_t = clip(w0 H_t / H_0, w_min, w_max), w- the configured one. Raises on a
    failure (the message names the step and key)."""
    import math

    algorithm = config.algorithm
    steps = [row["step"] for row in rows]
    if steps != list(range(1, config.train.max_steps + 1)):
        raise AssertionError(f"steps logged {steps}, expected 1..{config.train.max_steps}")
    h0 = rows[0]["entropy/rollout"]
    for row in rows:
        for key in ("loss", "grad_norm", "entropy/rollout", "eapo/w_pos", "eapo/w_neg", "eapo/H0", "kl"):
            value = row.get(key)
            if value is None or not math.isfinite(value):
                raise AssertionError(f"step {row['step']}: {key} = {value!r}, expected a finite number")
        expected = min(max(algorithm.w0 * row["entropy/rollout"] / h0, algorithm.w_min), algorithm.w_max)
        if not math.isclose(row["eapo/w_pos"], expected, rel_tol=1e-5, abs_tol=1e-7):
            raise AssertionError(
                f"step {row['step']}: eapo/w_pos = {row['eapo/w_pos']}, the rule gives {expected}"
            )
        if not math.isclose(row["eapo/H0"], h0, rel_tol=1e-6):
            raise AssertionError(f"step {row['step']}: eapo/H0 = {row['eapo/H0']}, step 1's entropy is {h0}")
        if row["eapo/w_neg"] != algorithm.w_neg:
            raise AssertionError(
                f"step {row['step']}: eapo/w_neg = {row['eapo/w_neg']}, configured {algorithm.w_neg}"
            )
    return {
        "steps": len(rows),
        "H0": h0,
        "w_pos": [row["eapo/w_pos"] for row in rows],
        "loss": [row["loss"] for row in rows],
        "passed": True,
    }


def step_floor(rows: list[dict[str, Any]], config, args) -> dict[str, Any]:
    """The median timed step's floor: generation (prefill + decoding), the policy's forward and
    backward, the reference forward (beta > 0) and AdamW, from the logged completion lengths (one row
    at the logged maximum, the rest at what the mean leaves: the decode steps and tokens no
    implementation can avoid) and the rendered prompts' lengths."""
    import math

    from roofline import lengths_from_summary, optimizer_cost

    shapes, ceilings = args.shapes, args.ceilings
    n = config.rollout.num_generations
    prompts = args.prompt_lengths[: config.train.prompts_per_step]
    prompt_rows = [p for p in prompts for _ in range(n)]
    micro = math.ceil(len(prompt_rows) / config.train.micro_batch_size)
    trainable = args.trainable_params
    floors = []
    for row in rows:
        completions = lengths_from_summary(
            len(prompt_rows), row["completions/mean_length"], row["completions/max_length"]
        )
        phases = {"generation": shapes.generation_floor(prompt_rows, completions, n, ceilings)["floor_s"]}
        forward = shapes.forward_cost(prompt_rows, completions, micro)
        phases["policy forward"] = ceilings.floor_s(*forward)
        if config.algorithm.beta > 0:
            phases["reference forward"] = ceilings.floor_s(*forward)
        phases["backward"] = ceilings.floor_s(*shapes.backward_cost(prompt_rows, completions, micro, None))
        phases["optimizer"] = ceilings.floor_s(*optimizer_cost(trainable))
        floors.append(phases)
    median_phases = {name: statistics.median(f[name] for f in floors) for name in floors[0]}
    return {"phases_s": median_phases, "floor_s": sum(median_phases.values())}


def _environment() -> dict[str, Any]:
    import torch
    import transformers
    import trl

    return {
        "device": torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "python": platform.python_version(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="Comma-separated: " + ", ".join(BACKENDS)
    )
    parser.add_argument(
        "--step-backends", default=None, help="Backends for the full-step timing (default: --backends)."
    )
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--generations", type=int, default=4, help="Samples per prompt (N).")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--max-prompt-tokens", type=int, default=256, help="Longer questions are truncated.")
    parser.add_argument(
        "--repeats", type=int, default=3, help="Timed rollout calls per backend (after 1 warm-up)."
    )
    parser.add_argument(
        "--steps", type=int, default=4, help="Optimisation steps per backend (first untimed; 0: skip)."
    )
    parser.add_argument("--micro-batch-size", type=int, default=32)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on a GPU), float32, bfloat16, float16.")
    parser.add_argument(
        "--config", default=None, help="Base training config for the steps (default: study.yaml)."
    )
    parser.add_argument(
        "--json", dest="json_out", default=None, help="Write the results here (updated per backend)."
    )
    parser.add_argument("--allow-cpu", action="store_true", help="Run without CUDA (to check the script).")
    parser.add_argument(
        "--check",
        action="store_true",
        help="Assert the step runs' losses and eapo/* metrics (exit 1 if not).",
    )
    parser.add_argument(
        "--runs-dir", default=None, help="Keep the step runs here (default: a temporary folder)."
    )
    parser.add_argument("--markdown", default=None, help="Write the results' tables here.")
    parser.add_argument("--no-roofline", action="store_true", help="Skip measuring the device's ceilings.")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for the step runs.")
    args = parser.parse_args()

    if not _cuda() and not args.allow_cpu:
        print(
            "bench/gpu.py: no CUDA device here; nothing measured (run it on a GPU machine, or pass --allow-cpu)."
        )
        return 0
    backends = [e.strip() for e in args.backends.split(",") if e.strip()]
    step_backends = [e.strip() for e in (args.step_backends or args.backends).split(",") if e.strip()]
    unknown = sorted(set(backends + step_backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; valid: {', '.join(BACKENDS)}")

    from eapo.runtime.backends import device_facts, vllm_runs_here
    from eapo.runtime.models import resolve_model

    facts = device_facts()
    model_path = resolve_model(args.model)
    prompts, data_name = load_prompts(model_path, args.prompts, args.max_prompt_tokens)

    measure_dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if _cuda() else "float32")
    args.shapes = _shapes(model_path, measure_dtype)
    args.prompt_lengths = _prompt_lengths(model_path, prompts)
    args.trainable_params = args.shapes.matmul_params  # a full fine-tune (the check's config)
    args.ceilings = None
    if not args.no_roofline:
        from roofline import measure_ceilings

        shapes = args.shapes
        rows = args.prompts * args.generations
        args.ceilings = measure_ceilings(
            "cuda" if _cuda() else "cpu",
            measure_dtype,
            linear_shape=(rows, shapes.hidden, shapes.intermediate),
            **({} if _cuda() else {"matmul_size": 1024, "bandwidth_bytes": 128 << 20, "repeats": 3}),
        )
        c = args.ceilings
        print(
            f"ceilings ({c.device}, {c.dtype}): matmul {c.flops_per_s / 1e12:.2f} TFLOP/s, "
            f"memory {c.bytes_per_s / 1e9:.0f} GB/s ("
            + ", ".join(f"{k} {v:.0f}" for k, v in c.detail.items())
            + ")"
        )
    report: dict[str, Any] = {
        "environment": _environment(),
        "settings": {
            "model": args.model,
            "dtype": args.dtype,
            "prompts": args.prompts,
            "generations": args.generations,
            "new_tokens": args.new_tokens,
            "data": data_name,
            "repeats": args.repeats,
            "steps": args.steps,
            "micro_batch_size": args.micro_batch_size,
        },
        "ceilings": args.ceilings.as_dict() if args.ceilings else None,
        "model_params": args.shapes.matmul_params,
        "rollout": {},
        "steps": {},
        "targets": {"tokens_per_s": TARGET_TOKENS_PER_S, "speedup_vs_generate": TARGET_SPEEDUP},
    }

    def save() -> None:
        if args.json_out:
            Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    def skip_reason(backend: str) -> str | None:
        if backend == "vllm" and not vllm_runs_here(facts):
            return "vllm not installed" if not facts.vllm else "no vLLM build for this device"
        if backend == "paged" and not facts.paged:
            return "transformers has no continuous batching"
        return None

    env = report["environment"]
    print(
        f"device: {env['device']}; torch {env['torch']}, transformers {env['transformers']}, trl {env['trl']}"
    )
    print(
        f"workload: {args.model} ({args.dtype}), {args.prompts} {data_name} prompts x N={args.generations}, "
        f"{args.new_tokens} new tokens"
    )
    for backend in backends:
        reason = skip_reason(backend)
        if reason:
            report["rollout"][backend] = {"skipped": reason}
            print(f"[rollout] {backend:9s} skipped: {reason}")
            continue
        try:
            result = bench_rollout(backend, model_path, prompts, args)
        except Exception as error:  # noqa: BLE001 - one backend failing must not hide the others
            result = {
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc()[-2000:],
            }
            print(f"[rollout] {backend:9s} FAILED: {result['error']}")
        else:
            print(
                f"[rollout] {backend:9s} {result['tokens_per_s']:10,.0f} tokens/s  ({result['tokens_per_call']:,.0f} "
                f"tokens in {result['seconds_per_call']:.2f} s; warm-up call {result['warmup_call_s']:.1f} s; "
                f"mean length {result['mean_length']:.0f}; peak {result['peak_gib'] or 0:.2f} GiB; "
                f"{_times(result['x_floor'])} floor)"
            )
        report["rollout"][backend] = result
        save()

    failed_checks = []
    if args.steps > 0:
        with tempfile.TemporaryDirectory(prefix="eapo-bench-") as tmp:
            runs_dir = Path(args.runs_dir) if args.runs_dir else Path(tmp)
            for backend in step_backends:
                reason = skip_reason(backend)
                if reason:
                    report["steps"][backend] = {"skipped": reason}
                    continue
                try:
                    result = bench_steps(backend, args, data_name, runs_dir)
                except Exception as error:  # noqa: BLE001
                    if isinstance(error, AssertionError) or args.check:  # a step that did not run is no pass
                        failed_checks.append(f"{backend}: {type(error).__name__}: {error}")
                    result = {
                        "error": f"{type(error).__name__}: {error}",
                        "traceback": traceback.format_exc()[-2000:],
                    }
                    print(f"[step]    {backend:9s} FAILED: {result['error']}")
                else:
                    print(
                        f"[step]    {backend:9s} {result['median_step_s']:8.2f} s/step (median of {result['steps_timed']}; "
                        f"first {result['first_step_s'] or 0:.1f} s; backend ran: {result['backend_ran']}; "
                        f"peak {result['peak_gib'] or 0:.2f} GiB; {_times(result['x_floor'])} floor"
                        + ("; check passed" if result["check"] else "")
                        + ")"
                    )
                report["steps"][backend] = result
                save()

    # Ratios against plain generate, measured in this run.
    base = report["rollout"].get("generate", {}).get("tokens_per_s")
    base_step = report["steps"].get("generate", {}).get("median_step_s")
    print("\nsummary (ratios against plain generate in this run):")
    best_backend, best_rate = None, 0.0
    for backend in dict.fromkeys(backends + step_backends):
        rollout = report["rollout"].setdefault(backend, {})
        rate = rollout.get("tokens_per_s")
        step = report["steps"].get(backend, {}).get("median_step_s")
        ratio = rate / base if rate and base else None
        step_ratio = base_step / step if step and base_step else None
        rollout["speedup_vs_generate"] = ratio
        if backend in report["steps"] and step:
            report["steps"][backend]["speedup_vs_generate"] = step_ratio
        if rate and rate > best_rate:
            best_backend, best_rate = backend, rate
        cells = [
            f"{backend:9s}",
            f"{rate:10,.0f} tok/s" if rate else f"{'–':>16s}",
            f"x{ratio:6.1f}" if ratio else f"{'–':>7s}",
            f"step {step:7.2f} s" if step else "step       –",
            f"x{step_ratio:5.1f}" if step_ratio else "",
        ]
        print("  " + "  ".join(cells))
    best_ratio = best_rate / base if base and best_rate else None
    report["best"] = {
        "backend": best_backend,
        "tokens_per_s": best_rate or None,
        "speedup_vs_generate": best_ratio,
    }
    met_rate = best_rate >= TARGET_TOKENS_PER_S
    met_ratio = best_ratio is not None and best_ratio >= TARGET_SPEEDUP
    report["targets"].update({"tokens_per_s_met": met_rate, "speedup_met": met_ratio})
    print(
        f"target >= {TARGET_TOKENS_PER_S:,} rollout tokens/s: {'met' if met_rate else 'NOT met'} "
        f"(best: {best_backend or '–'}, {best_rate:,.0f} tokens/s)"
    )
    ratio_text = f"x{best_ratio:.1f}" if best_ratio is not None else "not measured (no plain generate)"
    print(
        f"target >= {TARGET_SPEEDUP:.0f}x plain generate: {'met' if met_ratio else 'NOT met'} ({ratio_text})"
    )
    save()
    if args.json_out:
        print(f"results: {args.json_out}")
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(markdown(report), encoding="utf-8")
        print(f"tables: {args.markdown}")
    sys.stdout.flush()
    if args.check and failed_checks:
        print("check FAILED: " + "; ".join(failed_checks))
        return 1
    return 0


def _times(ratio: float | None) -> str:
    return f"x{ratio:.1f}" if ratio else "no"


def markdown(report: dict[str, Any]) -> str:
    """The report's tables (rollout, steps, ceilings) as Markdown."""
    env, settings, c = report["environment"], report["settings"], report.get("ceilings")
    lines = [
        f"# bench/gpu.py on {env['device']}",
        "",
        f"torch {env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}, trl {env['trl']}. "
        f"Model {settings['model']} ({report['model_params'] / 1e6:.0f}M matmul parameters, {settings['dtype']}); "
        f"{settings['prompts']} {settings['data']} prompts x N={settings['generations']}, "
        f"{settings['new_tokens']} new tokens.",
        "",
    ]
    if c:
        lines += [
            f"Ceilings measured in this run ({c['dtype']}): matmul {c['flops_per_s'] / 1e12:.2f} TFLOP/s, "
            f"memory {c['bytes_per_s'] / 1e9:.0f} GB/s ("
            + ", ".join(f"{k} {v:,.0f}" for k, v in c["detail"].items())
            + "). A floor is the larger of FLOPs at that rate and bytes at that bandwidth (bench/roofline.py).",
            "",
        ]
    lines += [
        "| rollout backend | tokens/s | s / call | floor s | x floor | x generate | peak GiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in report["rollout"].items():
        if set(r) <= {"speedup_vs_generate"}:  # a backend timed for steps only
            continue
        if "tokens_per_s" not in r:
            lines.append(f"| {name} | {r.get('skipped') or r.get('error') or '-'} | | | | | |")
            continue
        lines.append(
            f"| {name} | {r['tokens_per_s']:,.0f} | {r['seconds_per_call']:.2f} | {_cell(r.get('floor_s'), '.3f')} | "
            f"{_cell(r.get('x_floor'), '.1f')} | {_cell(r.get('speedup_vs_generate'), '.2f')} | {_cell(r.get('peak_gib'), '.2f')} |"
        )
    if report["steps"]:
        lines += [
            "",
            "| step backend | s / step (median) | floor s | x floor | peak GiB | check |",
            "| --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for name, r in report["steps"].items():
            if "median_step_s" not in r:
                lines.append(f"| {name} | {r.get('skipped') or r.get('error') or '-'} | | | | |")
                continue
            floor = (r.get("floor") or {}).get("floor_s")
            check = r.get("check")
            lines.append(
                f"| {name} | {r['median_step_s']:.2f} | {_cell(floor, '.3f')} | {_cell(r.get('x_floor'), '.1f')} | "
                f"{_cell(r.get('peak_gib'), '.2f')} | {'passed' if check and check.get('passed') else '-'} |"
            )
    return "\n".join(lines) + "\n"


def _cell(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "-"


if __name__ == "__main__":
    sys.exit(main())
