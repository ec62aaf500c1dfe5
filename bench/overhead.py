"""Step-time overhead of EAPOTrainer against plain TRL GRPO, measured side by side in one run.

Both trainers get the same tiny configuration (configs/tiny.yaml: model, data, reward, batch) and
TRL's ``loss_type="grpo"``. Runs alternate (GRPO, EAPO, GRPO, EAPO, ...) so machine noise hits both;
each run's first step is a warm-up and is not timed. The ratio of median step times is printed.
Target: <= 1.10.

    python bench/overhead.py [--steps 8] [--repeats 3] [--config configs/tiny.yaml] [key=value ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from step_timer import StepTimer  # noqa: E402 - after the offline switches

ROOT = Path(__file__).resolve().parents[1]
SOURCES: set[str] = set()  # where EAPOTrainer took H_t from in the timed runs


def run_once(
    kind: str, config, model_path, tokenizer, dataset, reward, out: Path, reuse_loss_pass: bool = True
) -> list[float]:
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from eapo.core import make_weighting
    from eapo.engines.trl.args import grpo_args, reward_function
    from eapo.engines.trl.trainer import EAPOTrainer

    timer = StepTimer()
    common = dict(
        model=model_path,
        reward_funcs=[reward_function(reward)],
        args=grpo_args(config, out),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    if kind == "eapo":
        trainer = EAPOTrainer(
            **common, weighting=make_weighting("eapo"), split_by="mean", reuse_loss_pass=reuse_loss_pass
        )
    else:
        trainer = GRPOTrainer(**common)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    if kind == "eapo":
        SOURCES.add(trainer.entropy_source())
    return timer.times[1:]  # drop the warm-up step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "tiny.yaml"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--extra-forward",
        action="store_true",
        help="Force EAPO's extra no-grad entropy forward (the path used with gradient accumulation).",
    )
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    from eapo.config import load_config
    from eapo.runtime.models import load_tokenizer, resolve_model
    from eapo.train import build_dataset, build_reward

    config = load_config(
        args.config,
        [
            f"train.max_steps={args.steps}",
            "train.save_steps=0",
            "logging.plot=false",
            "logging.progress=false",
            "algorithm.loss_type=grpo",
            f"data.limit={args.steps * 4}",
            *args.overrides,
        ],
    )
    model_path = resolve_model(config.model.name_or_path, seed=config.train.seed)
    tokenizer = load_tokenizer(model_path)
    dataset = build_dataset(config, tokenizer)
    reward = build_reward(config)

    times: dict[str, list[float]] = {"grpo": [], "eapo": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for kind in ("grpo", "eapo"):
                times[kind] += run_once(
                    kind,
                    config,
                    model_path,
                    tokenizer,
                    dataset,
                    reward,
                    Path(tmp) / f"{kind}{repeat}",
                    reuse_loss_pass=not args.extra_forward,
                )
    grpo, eapo = statistics.median(times["grpo"]), statistics.median(times["eapo"])
    print(
        f"config: {args.config} ({config.model.name_or_path}, {config.train.prompts_per_step} prompts x "
        f"{config.rollout.num_generations} rollouts, {config.rollout.max_completion_tokens} new tokens)"
    )
    print(f"EAPO entropy source: {', '.join(sorted(SOURCES))}")
    print(f"steps timed per trainer: {len(times['grpo'])} (after warm-up), alternating runs: {args.repeats}")
    print(f"median step time  TRL GRPO: {grpo * 1000:.1f} ms   EAPO: {eapo * 1000:.1f} ms")
    ratio = eapo / grpo
    print(
        f"EAPO / GRPO step-time ratio: {ratio:.3f}  (target <= 1.10: {'met' if ratio <= 1.10 else 'NOT met'})"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
