"""Rollout backends side by side on this machine: plain ``generate`` against vLLM (eager and compiled).

In one run, on SmolLM2-135M-Instruct (the embedded weights, float32) and the bundled demo prompts:

1. this machine's ceilings, measured first (bench/roofline.py): the fp32 matmul rate (``torch.matmul``
   2048 x 2048 and ``F.linear`` at the model's MLP shape) and the memory bandwidth (a copy and a sum);
2. rollout throughput at each ``--sizes`` entry (prompts x samples x new tokens; default 8x4x80 and
   16x4x256): generated tokens (EOS included) / wall time of one batched call, median over
   ``--repeats`` calls after an untimed one-prompt warm-up, for every ``--backends`` entry; each
   against its roofline floor (``x floor``: the call's time / the floor of its prefill and of every
   decoding step, max(FLOPs / matmul rate, bytes / bandwidth), from the rows' real lengths; decoding a
   135M model at these batches reads every weight once a step and is bound by memory), as a share of
   the matmul rate alone (tokens/s x FLOPs per token / matmul FLOP/s), and vLLM's ratio to ``generate``;
3. full training steps through the real recipe (``eapo.train.run`` on ``--step-config``, default
   configs/demo.yaml: LoRA, 2 prompts x 4 rollouts, 80 tokens) with each backend: the median step time
   after the first step, and inside it the generation phase (TRL's ``transformers.generate`` or
   ``vLLM.generate``) and vLLM's weight sync, with the backend's start-up (and compile) time.

Every measurement runs in a fresh subprocess (vLLM keeps global state in the process it runs in), one at
a time. Targets (issue "vLLM rollouts on every machine"): vLLM >= 1.5x ``generate`` at every size, and
inside a training step the generation phase >= 2x faster than ``generate``'s.

    python bench/rollout.py [--backends generate,vllm,vllm-compiled] [--sizes 8x4x80,16x4x256]
                            [--repeats 2] [--steps 4] [--step-config configs/demo.yaml] [--json OUT]
    python bench/rollout.py --quick     # the tiny model, small sizes: checks the script (CI)

Timings mean something only on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
BACKENDS = ("generate", "vllm", "vllm-compiled")
TARGET_ROLLOUT_RATIO = 1.5
TARGET_STEP_GENERATION_RATIO = 2.0


# ----------------------------------------------------------------------------------------------
# The ceiling and the work per token
# ----------------------------------------------------------------------------------------------


def flops_per_token(model_path: str, context: float) -> float:
    """Forward FLOPs of one decoded token: the weight matmuls (2 per multiply-add) plus attention over
    ``context`` cached positions (QK^T and AV), from the model's config."""
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model_path)
    hidden, heads, layers = c.hidden_size, c.num_attention_heads, c.num_hidden_layers
    head_dim = getattr(c, "head_dim", None) or hidden // heads
    kv = getattr(c, "num_key_value_heads", heads)
    per_layer = hidden * heads * head_dim + 2 * hidden * kv * head_dim + heads * head_dim * hidden
    per_layer += 3 * hidden * c.intermediate_size  # gate, up, down
    weights = layers * per_layer + hidden * c.vocab_size  # + the LM head
    attention = layers * 2 * heads * head_dim * context
    return 2.0 * (weights + attention)


# ----------------------------------------------------------------------------------------------
# Workers (each in its own process)
# ----------------------------------------------------------------------------------------------


def _prompts(model_path: str, count: int, config_path: str) -> list[str]:
    """``count`` prompts rendered as the step config renders them (its data, prompt and prefix)."""
    from eapo.config import load_config
    from eapo.data import default_prompt_for, load, render_prompts
    from eapo.runtime.models import load_tokenizer

    config = load_config(config_path)
    records = load(config.data.name, config.data.path, split="all", **config.data.options)
    records = (records * (count // len(records) + 1))[:count]
    return list(
        render_prompts(
            records,
            load_tokenizer(model_path),
            prompt=config.data.prompt or default_prompt_for(config.data.name),
            max_prompt_tokens=config.data.max_prompt_tokens,
            response_prefix=config.data.response_prefix,
        )
    )


def rollout_worker(backend: str, model: str, size: str, repeats: int, config_path: str) -> dict[str, Any]:
    from eapo.runtime.generate import TransformersGenerator, VLLMGenerator
    from eapo.runtime.models import load_tokenizer, resolve_model

    n_prompts, k, new_tokens = (int(part) for part in size.split("x"))
    model_path = resolve_model(model)
    prompts = _prompts(model_path, n_prompts, config_path)
    started = time.perf_counter()
    if backend == "generate":
        generator = TransformersGenerator(model_path, dtype="float32")
    else:
        generator = VLLMGenerator(model_path, dtype="float32", compile=backend == "vllm-compiled")
    load_s = time.perf_counter() - started
    sampling = dict(temperature=1.0, top_p=1.0)
    begin = time.perf_counter()
    generator.generate(prompts[:1], k=1, max_new_tokens=8, seed=0, **sampling)  # warm-up
    warmup_s = time.perf_counter() - begin
    calls, lengths = [], []
    for seed in range(1, repeats + 1):
        begin = time.perf_counter()
        groups = generator.generate(prompts, k=k, max_new_tokens=new_tokens, seed=seed, **sampling)
        seconds = time.perf_counter() - begin
        calls.append((seconds, sum(c.num_tokens for group in groups for c in group)))
        lengths.append([c.num_tokens for group in groups for c in group])
    tokenizer = load_tokenizer(model_path)
    prompt_lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    prompt_tokens = statistics.mean(prompt_lengths)
    mean_new = statistics.mean(tokens for _, tokens in calls) / (n_prompts * k)
    return {
        "tokens_per_s": statistics.median(tokens / seconds for seconds, tokens in calls),
        "seconds_per_call": statistics.median(seconds for seconds, _ in calls),
        "tokens_per_call": statistics.median(tokens for _, tokens in calls),
        "load_s": load_s,
        "warmup_s": warmup_s,
        "mean_prompt_tokens": prompt_tokens,
        "mean_new_tokens": mean_new,
        "flops_per_token": flops_per_token(model_path, prompt_tokens + mean_new / 2),
        "model_path": model_path,
        "group": k,
        "prompt_lengths": [n for n in prompt_lengths for _ in range(k)],
        "completion_lengths": lengths,
        "call_seconds": [seconds for seconds, _ in calls],
    }


def step_worker(
    backend: str, model: str, steps: int, config_path: str, overrides: list[str]
) -> dict[str, Any]:
    import trl.extras.profiling as profiling

    from eapo.config import load_config
    from eapo.train import run
    from step_timer import StepTimer

    phases: dict[str, list[float]] = defaultdict(list)
    original = profiling.ProfilingContext._log_metrics

    def record(self, duration: float) -> None:  # TRL times its phases but only reports them to trackers
        phases[self.name.rpartition("Trainer.")[2]].append(duration)  # "EAPOTrainer.vLLM.generate"
        original(self, duration)

    profiling.ProfilingContext._log_metrics = record

    backend_overrides = {
        "generate": ["rollout.backend=generate"],
        "vllm": ["rollout.backend=vllm", "rollout.vllm_compile=false"],
        "vllm-compiled": ["rollout.backend=vllm", "rollout.vllm_compile=true"],
    }[backend]
    config = load_config(
        config_path,
        [
            f"model.name_or_path={model}",
            f"train.max_steps={steps}",
            "train.save_steps=0",
            "logging.plot=false",
            "logging.progress=false",
            "logging.tensorboard=false",
            *backend_overrides,
            *overrides,
        ],
    )
    timer = StepTimer()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        run_dir = run(config, Path(out) / "run", callbacks=[timer])
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    total = time.perf_counter() - started
    generation = phases.get("vLLM.generate") or phases.get("transformers.generate") or []
    return {
        "backend_ran": summary["rollout/backend"],
        "rollout": summary["rollout"],
        "median_step_s": statistics.median(timer.times[1:] or timer.times),
        "first_step_s": timer.times[0],
        "median_generation_s": statistics.median(generation[1:] or generation) if generation else None,
        "median_sync_s": statistics.median(phases["sync_weights"]) if phases.get("sync_weights") else None,
        "setup_s": total - sum(timer.times),  # model + backend start-up (compile included), saving
        "steps": len(timer.times),
        "completion_mean_length": (summary.get("final_metrics") or {}).get("completion/mean_length"),
    }


def _spawn(*args: str) -> dict[str, Any]:
    """Run one worker in a fresh process; its last stdout line is its JSON result."""
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", *args], capture_output=True, text=True, env=os.environ.copy()
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout)[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="Comma-separated: " + ", ".join(BACKENDS)
    )
    parser.add_argument(
        "--sizes", default="8x4x80,16x4x256", help="prompts x samples x new tokens, comma-separated"
    )
    parser.add_argument("--repeats", type=int, default=2, help="Timed rollout calls per backend and size.")
    parser.add_argument(
        "--steps", type=int, default=4, help="Training steps per backend (first untimed; 0: none)."
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--step-config", default=str(ROOT / "configs" / "demo.yaml"))
    parser.add_argument("--json", dest="json_out", default=None)
    parser.add_argument("--quick", action="store_true", help="Tiny model, small sizes: checks the script.")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="key=value overrides for the training steps.")
    args = parser.parse_args()

    if args.worker:
        kind, backend, *rest = args.worker
        if kind == "rollout":
            model, size, repeats, config = rest
            result = rollout_worker(backend, model, size, int(repeats), config)
        else:
            model, steps, config, *overrides = rest
            result = step_worker(backend, model, int(steps), config, overrides)
        print(json.dumps(result))
        return 0

    if args.quick:
        args.model, args.sizes, args.repeats = "tiny", "2x2x16", 1
        args.steps, args.step_config = min(args.steps, 2), str(ROOT / "configs" / "tiny.yaml")
    from eapo.runtime.backends import device_facts, vllm_runs_here

    backends = [e.strip() for e in args.backends.split(",") if e.strip()]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; valid: {', '.join(BACKENDS)}")
    if not vllm_runs_here(device_facts()):
        skipped = [e for e in backends if e.startswith("vllm")]
        backends = [e for e in backends if not e.startswith("vllm")]
        print(f"no vLLM build for this device: {', '.join(skipped) or 'nothing'} skipped")

    import torch
    from transformers import AutoConfig

    from roofline import Shapes, measure_ceilings

    ceilings = measure_ceilings(
        "cpu", "float32", linear_shape=(1960, 576, 1536)
    )  # SmolLM2's MLP, a demo step
    ceiling = ceilings.detail
    rate = ceilings.flops_per_s / 1e9
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.is_available(),
        },
        "matmul_gflops": ceiling,
        "ceilings": ceilings.as_dict(),
        "settings": {"model": args.model, "sizes": args.sizes, "repeats": args.repeats, "steps": args.steps},
        "rollout": {},
        "steps": {},
    }
    print(
        f"fp32 matmul: {ceiling['matmul_2048_gflops']:.0f} GFLOP/s (2048^2), {ceiling['linear_1960x576x1536_gflops']:.0f} "
        f"GFLOP/s (F.linear 1960x576x1536); memory {ceiling['copy_gbytes_per_s']:.1f} GB/s (copy), "
        f"{ceiling['sum_gbytes_per_s']:.1f} GB/s (sum): rate {rate:.0f} GFLOP/s, bandwidth "
        f"{ceilings.bytes_per_s / 1e9:.1f} GB/s"
    )
    print(
        f"\nrollout, {args.model} float32, tokens/s (median of {args.repeats}), x its roofline floor, share of the matmul rate:"
    )
    print(
        f"{'size':>10}  {'backend':<14} {'tokens/s':>9} {'s/call':>7} {'load s':>7} {'floor s':>7} {'x floor':>7} "
        f"{'share':>6} {'x generate':>10}"
    )
    for size in [s.strip() for s in args.sizes.split(",") if s.strip()]:
        results = report["rollout"].setdefault(size, {})
        for backend in backends:
            result = _spawn("rollout", backend, args.model, size, str(args.repeats), args.step_config)
            results[backend] = result
            if "error" in result:
                print(f"{size:>10}  {backend:<14} failed: {result['error'].strip().splitlines()[-1]}")
                continue
            result["share_of_ceiling"] = result["tokens_per_s"] * result["flops_per_token"] / (rate * 1e9)
            shapes = Shapes(AutoConfig.from_pretrained(result["model_path"]), weight_bytes=4)
            floors = [
                shapes.generation_floor(result["prompt_lengths"], completions, result["group"], ceilings)[
                    "floor_s"
                ]
                for completions in result["completion_lengths"]
            ]
            result["floor_s"] = statistics.median(floors)
            result["x_floor"] = statistics.median(
                seconds / floor for seconds, floor in zip(result["call_seconds"], floors, strict=True)
            )
            base = results.get("generate", {}).get("tokens_per_s")
            if base and backend != "generate":
                result["ratio_to_generate"] = result["tokens_per_s"] / base
            print(
                f"{size:>10}  {backend:<14} {result['tokens_per_s']:9.1f} {result['seconds_per_call']:7.1f} "
                f"{result['load_s']:7.1f} {result['floor_s']:7.2f} {result['x_floor']:7.1f} {result['share_of_ceiling']:6.1%} "
                f"{result.get('ratio_to_generate', 1.0) if backend != 'generate' else 1.0:10.2f}"
            )
    if args.steps > 0:
        print(
            f"\ntraining steps through the real recipe ({Path(args.step_config).name}, {args.steps} steps):"
        )
        print(
            f"{'backend':<14} {'step s':>7} {'gen s':>7} {'sync s':>7} {'setup s':>8} {'gen x generate':>14}"
        )
        for backend in backends:
            result = _spawn("step", backend, args.model, str(args.steps), args.step_config, *args.overrides)
            report["steps"][backend] = result
            if "error" in result:
                print(f"{backend:<14} failed: {result['error'].strip().splitlines()[-1]}")
                continue
            base = report["steps"].get("generate", {}).get("median_generation_s")
            if base and backend != "generate" and result["median_generation_s"]:
                result["generation_speedup"] = base / result["median_generation_s"]
            sync = result["median_sync_s"]
            print(
                f"{backend:<14} {result['median_step_s']:7.1f} {result['median_generation_s']:7.1f} "
                f"{sync if sync is not None else float('nan'):7.2f} {result['setup_s']:8.1f} "
                f"{result.get('generation_speedup', 1.0):14.2f}"
            )
    ratios = [
        r["ratio_to_generate"]
        for size in report["rollout"].values()
        for r in size.values()
        if "ratio_to_generate" in r
    ]
    speedups = [r["generation_speedup"] for r in report["steps"].values() if "generation_speedup" in r]
    report["targets"] = {
        "rollout_ratio": TARGET_ROLLOUT_RATIO,
        "rollout_ratio_min": min(ratios) if ratios else None,
        "step_generation_speedup": TARGET_STEP_GENERATION_RATIO,
        "step_generation_speedup_max": max(speedups) if speedups else None,
    }
    if ratios:
        print(
            f"\nvLLM / generate, smallest rollout ratio: {min(ratios):.2f} (target >= {TARGET_ROLLOUT_RATIO})"
        )
    if speedups:
        print(
            f"generation phase inside a step, best vLLM speed-up: {max(speedups):.2f} "
            f"(target >= {TARGET_STEP_GENERATION_RATIO})"
        )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    failed = [e for size in report["rollout"].values() for e, r in size.items() if "error" in r]
    failed += [e for e, r in report["steps"].items() if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
