"""One training step through the real recipe, split into phases, each against this machine's floor.

In one run:

1. this machine's ceilings (bench/roofline.py): the fp32 matmul rate (``torch.matmul`` 2048 x 2048
   and ``F.linear`` at the model's MLP shape over the step's tokens; the faster) and the memory
   bandwidth (a copy and a sum of 512 MiB; the faster), measured in the same run after the steps;
2. for every ``--backends`` entry (``auto``: what ``rollout.backend`` resolves to here; ``generate``)
   and every ``--variants`` entry (``trl``: TRL's fused LM head over every position; ``eapo``:
   eapo.engines.trl.policy_forward, completion positions only and the frozen layers shared with the reference),
   ``--steps`` steps of ``--config`` (default configs/demo.yaml) through ``eapo.train.run``, each
   in a fresh process, with the time of every phase of every step:

   ===================  =========================================================================
   generation           TRL's ``vLLM.generate`` / ``transformers.generate``
   weight sync          the policy's weights into vLLM (``sync_weights``)
   reward               ``_calculate_rewards`` (format, Rouge-L, the reranker stand-in, ...)
   reference log-probs  the reference pass (adapter disabled, or the reference model)
   old log-probs        TRL's no-grad policy pass (importance correction, mu > 1), or eapo's
                        extra entropy pass
   policy forward       the loss pass's forward (log-probs and entropies, with gradients)
   backward             ``accelerate.backward``
   optimizer            ``optimizer.step()``
   other                the rest of the step (loss maths, H_t and weights, clipping, logging)
   ===================  =========================================================================

   and the FLOPs and bytes each phase needs, counted from the model's shapes and the step's real
   (unpadded) tokens (bench/roofline.py): 2 FLOPs per multiply-add of the decoder's matmuls and
   causal attention, the LM head only where a token is scored, one prefill per distinct prompt;
   every weight read once per pass and micro-batch, once per decoding step, the KV cache once per
   decoded token; a LoRA backward is the input gradient through the adapted layers and the LM head,
   a full fine-tune's twice the forward; AdamW 28 bytes per trainable parameter. A phase's floor is
   max(FLOPs / matmul rate, bytes / bandwidth) (decoding: summed step by step); the ratio is time /
   floor. The step's floor is the sum of its phases' (reward, sync and other have none, so their time
   counts against it). The first step of each run (warm-up, start-up)
   is not timed; the table shows the median of the others.

    python bench/step.py [--config configs/demo.yaml] [--backends auto,generate] [--variants trl,eapo]
                         [--steps 4] [--json OUT] [--set KEY=VALUE ...]
    python bench/step.py --quick     # the tiny model with LoRA, generate, 2 steps: checks the script (CI)
    python bench/step.py --methods grpo,entropy_bonus,adaptive_entropy,clip_higher,clip_cov,kl_cov,top_entropy
                     # each algorithm.method once (first backend, last variant), its step time against the first's
    python bench/step.py --backends auto --variants eapo --arms "rollout.stop=[]" "rollout.stop=['</advice>']"
                     # each override once: what stopping at the closing tag saves per step

Timings mean something only on a quiet machine. The run fails only on errors, never on a ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
PHASES = (
    "generation",
    "weight sync",
    "reward",
    "reference log-probs",
    "old log-probs",
    "policy forward",
    "backward",
    "optimizer",
    "other",
)
VARIANTS = {
    "trl": ["train.lm_head=trl"],
    "eapo": ["train.lm_head=eapo", "train.share_frozen_layers=true"],
}
QUICK_OVERRIDES = [
    "model.lora.enabled=true",
    "model.lora.layers=1",
    "model.lora.r=4",
    "model.lora.target_modules=[q_proj,v_proj,up_proj]",
    "algorithm.beta=0.04",
]
TARGET_RATIO = 2.0

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roofline import Ceilings, Shapes, measure_ceilings, optimizer_cost  # noqa: E402

# ----------------------------------------------------------------------------------------------
# The floor: the machine's matmul rate and each phase's arithmetic
# ----------------------------------------------------------------------------------------------


def phase_floors(
    shapes: Shapes,
    batch: dict[str, Any],
    adapted_layers: int | None,
    micro_batch_size: int,
    trainable_params: int,
    ceilings: Ceilings,
    shared_frozen: bool = False,
) -> dict[str, dict[str, float]]:
    """Each phase's FLOPs, bytes and floor in one step (see the module docstring). ``shared_frozen``:
    the policy pass starts from the reference pass's hidden states below the adapted layers (eapo's
    log-probs with LoRA on the last layers and a reference pass), so it runs only the adapted layers."""
    prompts, completions, group = batch["prompt_lengths"], batch["completion_lengths"], batch["group_size"]
    micro = math.ceil(len(prompts) / max(micro_batch_size, 1))
    generation = shapes.generation_floor(prompts, completions, group, ceilings)
    forward = shapes.forward_cost(prompts, completions, micro)
    policy = forward
    if shared_frozen and adapted_layers is not None and batch["reference"]:
        policy = shapes.forward_cost(prompts, completions, micro, layers=adapted_layers)
    costs = {
        "reference log-probs": forward if batch["reference"] else (0.0, 0.0),
        "old log-probs": forward if batch["old_logps"] else (0.0, 0.0),
        "policy forward": policy,
        "backward": shapes.backward_cost(prompts, completions, micro, adapted_layers),
        "optimizer": optimizer_cost(trainable_params),
    }
    out = {
        "generation": {
            "flops": generation["flops"],
            "bytes": generation["bytes"],
            "floor_s": generation["floor_s"],
        }
    }
    for name, (flops, bytes_) in costs.items():
        out[name] = {
            "flops": flops,
            "bytes": bytes_,
            "floor_s": ceilings.floor_s(flops, bytes_) if flops or bytes_ else 0.0,
        }
    return out


# ----------------------------------------------------------------------------------------------
# The worker: a few steps of the recipe with every phase timed (in its own process)
# ----------------------------------------------------------------------------------------------


class PhaseClock:
    """Accumulates named phase times for the current step."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = defaultdict(float)
        self.started = 0.0

    def add(self, name: str, seconds: float) -> None:
        self.current[name] += seconds

    @contextmanager
    def timing(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)


def _instrument(clock: PhaseClock, batches: list[dict[str, Any]]) -> None:
    """Wrap TRL's and eapo's methods so each phase's time lands in ``clock``."""
    import accelerate
    import torch
    import trl.extras.profiling as profiling
    import trl.trainer.grpo_trainer as grpo

    from eapo.engines.trl.trainer import EAPOTrainer

    names = {
        "vLLM.generate": "generation",
        "transformers.generate": "generation",
        "transformers.generate_batch": "generation",
        "sync_weights": "weight sync",
        "_calculate_rewards": "reward",
    }
    original_log = profiling.ProfilingContext._log_metrics

    def record(self, duration: float) -> None:  # TRL times these phases and reports them to trackers only
        name = names.get(self.name.rpartition("Trainer.")[2]) or names.get(self.name)
        if name:
            clock.add(name, duration)
        original_log(self, duration)

    profiling.ProfilingContext._log_metrics = record

    in_reference = {"on": False}
    original_use_adapter = grpo.use_adapter

    @contextmanager
    def use_adapter(model, adapter_name):
        in_reference["on"] = True
        try:
            with original_use_adapter(model, adapter_name):
                yield
        finally:
            in_reference["on"] = False

    grpo.use_adapter = use_adapter

    logps = EAPOTrainer._get_per_token_logps_and_entropies

    def timed_logps(self, model, *args, **kwargs):
        if torch.is_grad_enabled():
            name = "policy forward"
        elif in_reference["on"] or (self.ref_model is not None and model is self.ref_model):
            name = "reference log-probs"
        else:
            name = "old log-probs"
        with clock.timing(name):
            return logps(self, model, *args, **kwargs)

    EAPOTrainer._get_per_token_logps_and_entropies = timed_logps

    generate_and_score = EAPOTrainer._generate_and_score_completions

    def recorded(self, inputs):
        output = generate_and_score(self, inputs)
        if self.model.training:
            batches.append(
                {
                    "prompt_lengths": output["prompt_mask"].sum(1).tolist(),
                    "completion_lengths": output["completion_mask"].sum(1).tolist(),
                    "group_size": self.num_generations,
                    "reference": self.beta != 0.0,
                    "old_logps": output.get("old_per_token_logps") is not None
                    or self.entropy_source() == "extra_forward",
                }
            )
        return output

    EAPOTrainer._generate_and_score_completions = recorded

    backward = accelerate.Accelerator.backward

    def timed_backward(self, *args, **kwargs):
        with clock.timing("backward"):
            return backward(self, *args, **kwargs)

    accelerate.Accelerator.backward = timed_backward


def step_worker(
    config_path: str, backend: str, variant: str, steps: int, overrides: list[str]
) -> dict[str, Any]:
    from transformers import AutoConfig, TrainerCallback

    from eapo.config import load_config
    from eapo.runtime.models import resolve_model
    from eapo.train import run

    clock = PhaseClock()
    batches: list[dict[str, Any]] = []
    _instrument(clock, batches)
    trainable = {"params": 0}

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            clock.current = defaultdict(float)
            clock.started = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            self._optimizer = time.perf_counter()
            if model is not None and not trainable["params"]:
                trainable["params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)

        def on_optimizer_step(self, args, state, control, **kwargs):
            clock.add("optimizer", time.perf_counter() - self._optimizer)

        def on_step_end(self, args, state, control, **kwargs):
            clock.current["step"] = time.perf_counter() - clock.started
            clock.steps.append(dict(clock.current))

    backend_overrides = [] if backend == "auto" else [f"rollout.backend={backend}"]
    config = load_config(
        config_path,
        [
            f"train.max_steps={steps}",
            "train.save_steps=0",
            "train.eval_steps=0",
            "logging.plot=false",
            "logging.progress=false",
            "logging.tensorboard=false",
            *backend_overrides,
            *VARIANTS[variant],
            *overrides,
        ],
    )
    model_path = resolve_model(config.model.name_or_path, seed=config.train.seed)
    with tempfile.TemporaryDirectory() as out:
        run_dir = run(config, Path(out) / "run", callbacks=[Steps()])
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    lora = config.model.lora
    model_config = AutoConfig.from_pretrained(model_path)
    adapted = None
    if lora.enabled:
        adapted = lora.layers if isinstance(lora.layers, int) else len(lora.layers or [])
        adapted = adapted or model_config.num_hidden_layers
    return {
        "backend": backend,
        "variant": variant,
        "backend_ran": summary["rollout/backend"],
        "steps": clock.steps,
        "batches": batches,
        "adapted_layers": adapted,
        "model_path": model_path,
        "micro_batch_size": config.train.micro_batch_size,
        "trainable_params": trainable["params"],
        "losses": [row["loss"] for row in metrics if "loss" in row],
        "entropies": [row["entropy/rollout"] for row in metrics if "entropy/rollout" in row],
    }


def _spawn(*args: str) -> dict[str, Any]:
    """Run one worker in a fresh process; its last stdout line is its JSON result."""
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", *args], capture_output=True, text=True, env=os.environ.copy()
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args[:3]} failed:\n{(proc.stderr or proc.stdout)[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------


def summarise(result: dict[str, Any], ceilings: Ceilings) -> dict[str, Any]:
    """Median phase times over the timed steps, with FLOPs, bytes, floors and ratios."""
    from transformers import AutoConfig

    shapes = Shapes(AutoConfig.from_pretrained(result["model_path"]), weight_bytes=4)  # fp32 on a CPU
    timed = list(range(1, len(result["steps"]))) or [0]  # the first step warms up
    floors = [
        phase_floors(
            shapes,
            result["batches"][i],
            result["adapted_layers"],
            result["micro_batch_size"],
            result["trainable_params"],
            ceilings,
            shared_frozen=result["variant"] == "eapo",
        )
        for i in timed
    ]
    phases: dict[str, dict[str, Any]] = {}
    for name in PHASES:
        if name == "other":
            continue
        seconds = statistics.median(result["steps"][i].get(name, 0.0) for i in timed)
        phase: dict[str, Any] = {"s": seconds, "gflop": None, "gb": None, "floor_s": None, "bound": None}
        if name in floors[0] and (floors[0][name]["flops"] or floors[0][name]["bytes"]):
            flops = statistics.median(f[name]["flops"] for f in floors)
            bytes_ = statistics.median(f[name]["bytes"] for f in floors)
            phase.update(
                gflop=flops / 1e9,
                gb=bytes_ / 1e9,
                floor_s=statistics.median(f[name]["floor_s"] for f in floors),
                bound=ceilings.bound(flops, bytes_),
            )
        phases[name] = phase
    step_s = statistics.median(result["steps"][i]["step"] for i in timed)
    phases["other"] = {
        "s": max(step_s - sum(p["s"] for p in phases.values()), 0.0),
        "gflop": None,
        "gb": None,
        "floor_s": None,
        "bound": None,
    }
    for phase in phases.values():
        phase["ratio"] = phase["s"] / phase["floor_s"] if phase["floor_s"] else None
    floor = sum(p["floor_s"] or 0.0 for p in phases.values())
    return {
        "backend": result["backend"],
        "backend_ran": result["backend_ran"],
        "variant": result["variant"],
        "timed_steps": len(timed),
        "phases": {name: phase for name, phase in phases.items() if phase["s"] > 0 or phase["gflop"]},
        "step": {
            "s": step_s,
            "gflop": sum(p["gflop"] or 0.0 for p in phases.values()),
            "gb": sum(p["gb"] or 0.0 for p in phases.values()),
            "floor_s": floor,
        },
        "step_ratio": step_s / floor if floor else None,
        "losses": result["losses"],
        "entropies": result["entropies"],
        "tokens": {
            "sequences": len(result["batches"][0]["prompt_lengths"]),
            "prompt_mean": statistics.mean(result["batches"][0]["prompt_lengths"]),
            "completion_mean": statistics.mean(
                statistics.mean(b["completion_lengths"]) for b in result["batches"]
            ),
        },
    }


def _fmt(value: float | None, spec: str) -> str:
    width = int(spec.split(".")[0] or 0)
    return f"{'—':>{width}}" if value is None else format(value, spec)


def print_table(report: dict[str, Any]) -> None:
    print(
        f"\n## backend {report['backend']} ({report['backend_ran']}), log-probs {report['variant']}: "
        f"median of {report['timed_steps']} step(s), {report['tokens']['sequences']} sequences, "
        f"prompt {report['tokens']['prompt_mean']:.0f} + completion {report['tokens']['completion_mean']:.0f} tokens"
    )
    print(
        f"| {'phase':<20} | {'time s':>7} | {'GFLOP':>7} | {'GB':>7} | {'floor s':>7} | {'bound':>7} | {'× floor':>7} |"
    )
    print(f"|{'-' * 22}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|")
    for name, phase in report["phases"].items():
        print(
            f"| {name:<20} | {phase['s']:7.2f} | {_fmt(phase['gflop'], '7.1f')} | {_fmt(phase['gb'], '7.2f')} | "
            f"{_fmt(phase['floor_s'], '7.3f')} | {phase['bound'] or '—':>7} | {_fmt(phase['ratio'], '7.1f')} |"
        )
    step = report["step"]
    print(
        f"| {'**step**':<20} | {step['s']:7.2f} | {step['gflop']:7.1f} | {step['gb']:7.2f} | {step['floor_s']:7.3f} | "
        f"{'':>7} | {_fmt(report['step_ratio'], '7.2f')} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"))
    parser.add_argument(
        "--backends", default="auto,generate", help="auto (rollout.backend here), generate, vllm"
    )
    parser.add_argument("--variants", default="trl,eapo", help="Comma-separated: " + ", ".join(VARIANTS))
    parser.add_argument("--steps", type=int, default=4, help="Steps per run (the first is not timed).")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="Config override.")
    parser.add_argument("--json", help="Also write the report as JSON here.")
    parser.add_argument("--quick", action="store_true", help="tiny + LoRA, generate, 2 steps (CI).")
    parser.add_argument(
        "--methods",
        help="Comma-separated algorithm.method values, each run once on the first backend and the last variant, "
        "in this order; prints each one's step time against the first's (e.g. grpo,clip_cov,top_entropy).",
    )
    parser.add_argument(
        "--arms",
        nargs="+",
        help="Config overrides, each one arm run once on the first backend and the last variant, in this order; "
        "prints each arm's step, generation time and completion length against the first's (e.g. "
        '"rollout.stop=[]" "rollout.stop=[\'</advice>\']": what stopping at the tag saves).',
    )
    parser.add_argument("--worker", nargs=5, metavar=("CONFIG", "BACKEND", "VARIANT", "STEPS", "OVERRIDES"))
    args = parser.parse_args()

    if args.worker:
        config_path, backend, variant, steps, overrides = args.worker
        print(json.dumps(step_worker(config_path, backend, variant, int(steps), json.loads(overrides))))
        return 0

    if args.quick:
        args.config = str(ROOT / "configs" / "tiny.yaml")
        args.backends, args.steps = "generate", 2
        args.overrides = QUICK_OVERRIDES + args.overrides
    from eapo.runtime.backends import choose_rollout_backend, device_facts

    # "auto" is what rollout.backend=auto resolves to here; one run per distinct backend
    auto = choose_rollout_backend("auto", device_facts())
    backends = [e.strip() for e in args.backends.split(",") if e.strip()]
    backends = [
        e
        for i, e in enumerate(backends)
        if (auto if e == "auto" else e) not in [auto if x == "auto" else x for x in backends[:i]]
    ]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"unknown --variants {unknown}; choose from {', '.join(VARIANTS)}")

    from transformers import AutoConfig

    print(f"# bench/step.py: {args.config}, {args.steps} steps per run")
    results = []
    methods = [m.strip() for m in (args.methods or "").split(",") if m.strip()]
    if methods:
        for method in methods:
            print(
                f"running algorithm.method={method}, backend {backends[0]}, log-probs {variants[-1]} ...",
                flush=True,
            )
            # each method at its own defaults: the config's weights (e.g. demo.yaml's w0) are cleared
            weights = [
                f"algorithm.{key}=null" for key in ("w_pos", "w_neg", "w0", "w_min", "w_max", "anchor_steps")
            ]
            overrides = [*weights, *args.overrides, f"algorithm.method={method}"]
            result = _spawn(args.config, backends[0], variants[-1], str(args.steps), json.dumps(overrides))
            results.append({**result, "method": method})
    arms = list(args.arms or [])
    for arm in arms:
        print(f"running {arm}, backend {backends[0]}, log-probs {variants[-1]} ...", flush=True)
        overrides = [*args.overrides, arm]
        result = _spawn(args.config, backends[0], variants[-1], str(args.steps), json.dumps(overrides))
        results.append({**result, "arm": arm})
    for backend in backends if not (methods or arms) else []:
        for variant in variants:
            print(f"running backend {backend}, log-probs {variant} ...", flush=True)
            results.append(_spawn(args.config, backend, variant, str(args.steps), json.dumps(args.overrides)))

    # The ceiling, measured in this run after the steps (on the step's own MLP shape)
    model_config = AutoConfig.from_pretrained(results[0]["model_path"])
    first = results[0]["batches"][0]
    tokens = int(sum(first["prompt_lengths"]) + sum(first["completion_lengths"]))
    ceilings = measure_ceilings(
        "cpu", "float32", linear_shape=(tokens, model_config.hidden_size, model_config.intermediate_size)
    )
    print(
        f"ceilings (fp32, best of 5): matmul {ceilings.flops_per_s / 1e9:.0f} GFLOP/s, memory "
        f"{ceilings.bytes_per_s / 1e9:.1f} GB/s ("
        + ", ".join(f"{k} {v:.1f}" for k, v in ceilings.detail.items())
        + ")"
    )
    reports = []
    for result in results:
        report = summarise(result, ceilings)
        if "method" in result:
            report["method"] = result["method"]
            print(f"\n# algorithm.method={result['method']}")
        if "arm" in result:
            report["arm"] = result["arm"]
            print(f"\n# {result['arm']}")
        reports.append(report)
        print_table(report)
    if methods:
        base = reports[0]
        print(f"\n## step time against {base['method']} (same run, median of {base['timed_steps']} step(s))")
        print(f"| {'method':<18} | {'step s':>7} | {'× ' + base['method']:>9} | {'other s':>7} |")
        print(f"|{'-' * 20}|{'-' * 9}|{'-' * 11}|{'-' * 9}|")
        for report in reports:
            other = report["phases"].get("other", {}).get("s")
            print(
                f"| {report['method']:<18} | {report['step']['s']:7.2f} | "
                f"{report['step']['s'] / base['step']['s']:9.3f} | {_fmt(other, '7.2f')} |"
            )

    if arms:
        base = reports[0]
        gen = "generation"
        print(f"\n## against {base['arm']} (same run, median of {base['timed_steps']} step(s) each)")
        print(
            f"| {'arm':<32} | {'step s':>7} | {'× first':>7} | {'gen s':>7} | {'× first':>7} | {'tokens':>7} |"
        )
        print(f"|{'-' * 34}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 9}|")
        for report in reports:
            g, g0 = report["phases"].get(gen, {}).get("s"), base["phases"].get(gen, {}).get("s")
            print(
                f"| {report['arm']:<32} | {report['step']['s']:7.2f} | {report['step']['s'] / base['step']['s']:7.3f} | "
                f"{_fmt(g, '7.2f')} | {_fmt(g / g0 if g and g0 else None, '7.3f')} | "
                f"{report['tokens']['completion_mean']:7.1f} |"
            )

    print(f"\n## whole step: time / floor (target <= {TARGET_RATIO:.1f})")
    for report in reports:
        print(
            f"- {report['backend']} ({report['backend_ran']}), {report['variant']}: {report['step']['s']:.2f} s, "
            f"floor {report['step']['floor_s']:.2f} s, ratio {_fmt(report['step_ratio'], '.2f')}"
        )
    by_backend = defaultdict(dict)
    for report in reports:
        by_backend[report["backend"]][report["variant"]] = report
    for backend, pair in by_backend.items():
        if {"trl", "eapo"} <= pair.keys():
            before, after = pair["trl"], pair["eapo"]
            first = (before["losses"][:1], after["losses"][:1])
            print(
                f"- {backend}: eapo's log-probs {before['step']['s'] / after['step']['s']:.2f}x faster per step; "
                f"first step's loss trl {first[0]} vs eapo {first[1]}, H_t {before['entropies'][:1]} vs "
                f"{after['entropies'][:1]}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"ceilings": ceilings.as_dict(), "runs": reports}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
