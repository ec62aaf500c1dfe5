"""The cost of eapo's plugin inside verl: eapo's step against verl's own GRPO step, side by side in one run.

Both variants run ``python -m verl.trainer.main_ppo`` with the overrides ``eapo train --engine verl``
writes for ``--config`` (:func:`eapo.engines.verl.launch.verl_overrides`), so model, data, reward,
objective, batch sizes and the CPU platform are the same:

* ``grpo``: verl's own trainer and estimator (``trainer.v1.trainer_mode=sync``,
  ``algorithm.adv_estimator=grpo``), no ``algorithm.eapo``;
* ``eapo``: eapo's trainer and estimator with the config's method (EAPO: its per-step H_t, w+, the
  run state in each checkpoint).

The variants alternate (``grpo, eapo, grpo, eapo, ...``, ``--rounds`` each), ``--steps`` steps per
run. Each step's time is verl's own ``timing_s/step``, with its phases (``timing_s/gen``,
``old_log_prob``, ``ref``, ``adv``, ``update_actor``, ``update_weights``, ``save_checkpoint``). Step 1
of each run is the warm-up (vLLM's first batch) and is not timed. The table shows each variant's
median over its timed steps and eapo's median ÷ grpo's. Timings mean something only on a quiet
machine. The run fails only on errors, never on a ratio.

    .venv-verl/bin/python bench/verl_plugin.py [--config tiny] [--steps 6] [--rounds 2] [--set KEY=VALUE ...]
    .venv-verl/bin/python bench/verl_plugin.py --print-overrides   # the two argument lists, no run
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
from pathlib import Path

PHASES = ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "save_checkpoint", "step")
#: The overrides that make a run verl's own GRPO instead of eapo's trainer and estimator.
GRPO = ("trainer.v1.trainer_mode=sync", "algorithm.adv_estimator=grpo")


def variant_args(eapo_args: list[str], variant: str) -> list[str]:
    """``eapo``'s arguments as they are, or turned into verl's own GRPO (same everything else)."""
    if variant == "eapo":
        return list(eapo_args)
    kept = [
        arg
        for arg in eapo_args
        if not arg.startswith(("+algorithm.eapo.", "trainer.v1.trainer_mode=", "algorithm.adv_estimator="))
    ]
    return [*kept, *GRPO]


def prepare(config_name: str, steps: int, sets: list[str], work: Path):
    """The config, its inputs under ``work`` and eapo's main_ppo arguments for it."""
    import torch

    from eapo.commands.train import config_path
    from eapo.config import load_config
    from eapo.engines.verl.launch import VerlLayout, prepare_launch
    from eapo.runtime.models import resolve_model

    overrides = [
        "engine=verl",
        "rollout.backend=auto",
        f"train.max_steps={steps}",
        "train.save_steps=0",
        *sets,
    ]
    config = load_config(config_path(Path(config_name)), overrides)
    layout = VerlLayout(work / "inputs")
    layout.root.mkdir(parents=True, exist_ok=True)
    model_path = resolve_model(config.model.name_or_path, seed=config.train.seed)
    args = prepare_launch(config, layout, model_path, resume=False, cpu=not torch.cuda.is_available())
    return config, args


def run_once(args: list[str], out: Path, env: dict[str, str]) -> list[dict[str, float]]:
    """One main_ppo run into ``out``; each step's ``timing_s/*``."""
    out.mkdir(parents=True)
    metrics = out / "verl_metrics.jsonl"
    args = [
        *args,
        f"trainer.default_local_dir={out / 'checkpoints'}",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        "trainer.test_freq=-1",
    ]
    with (out / "main_ppo.log").open("w") as log:
        proc = subprocess.run(
            [sys.executable, "-m", "verl.trainer.main_ppo", *args],
            cwd=out,
            env={**env, "VERL_FILE_LOGGER_PATH": str(metrics)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if proc.returncode != 0:
        raise SystemExit(f"main_ppo failed (exit {proc.returncode}); see {out / 'main_ppo.log'}")
    steps = []
    for line in metrics.read_text().splitlines():
        data = json.loads(line)["data"]
        steps.append({phase: float(data.get(f"timing_s/{phase}", 0.0)) for phase in PHASES})
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="tiny", help="eapo config or preset name (default: tiny)")
    parser.add_argument("--steps", type=int, default=6, help="steps per run (step 1 is not timed)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each variant, alternating")
    parser.add_argument("--set", action="append", default=[], help="a config override KEY=VALUE")
    parser.add_argument("--json", type=Path, help="write the per-step timings here")
    parser.add_argument("--print-overrides", action="store_true", help="print both argument lists and exit")
    options = parser.parse_args(argv)

    from eapo.engines.verl.platform import cpu_env

    with tempfile.TemporaryDirectory(prefix="eapo-bench-verl-") as tmp:
        work = Path(tmp)
        config, eapo_args = prepare(options.config, options.steps, options.set, work)
        variants = {name: variant_args(eapo_args, name) for name in ("grpo", "eapo")}
        if options.print_overrides:
            for name, args in variants.items():
                print(f"# {name}\n" + "\n".join(args))
            return 0
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        env.update(cpu_env(os.environ))
        timings: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        started = time.time()
        for round_index in range(options.rounds):
            for name, args in variants.items():
                steps = run_once(args, work / f"{name}-{round_index}", env)
                timings[name] += steps[1:]  # step 1: the warm-up
                print(
                    f"round {round_index + 1} {name}: steps 2-{len(steps)} "
                    + " ".join(f"{s['step']:.2f}" for s in steps[1:]),
                    flush=True,
                )
    print(
        f"\n{config.model.name_or_path}, method {config.algorithm.method}, {options.steps} steps x {options.rounds} "
        f"runs per variant, alternating; {time.time() - started:.0f} s in all. Median seconds per timed step:\n"
    )
    print("| phase | verl GRPO | eapo | eapo ÷ GRPO |")
    print("|---|---|---|---|")
    for phase in PHASES:
        grpo = statistics.median(step[phase] for step in timings["grpo"])
        eapo = statistics.median(step[phase] for step in timings["eapo"])
        ratio = f"{eapo / grpo:.3f}" if grpo > 0 else "–"
        print(f"| {phase} | {grpo:.3f} | {eapo:.3f} | {ratio} |")
    if options.json:
        options.json.write_text(json.dumps(timings, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
