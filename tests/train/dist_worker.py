"""One process of a multi-process ``eapo train``, launched by tests/train/test_distributed.py.

    python -m torch.distributed.run --standalone --nproc_per_node 2 dist_worker.py \\
        DUMP_DIR [--kill-after-save N] -- ARGS OF eapo train ...

Runs the ``eapo train`` command (``eapo.cli``) with ARGS and writes what *this* process computed to
``DUMP_DIR/rank<R>.json``, so the test can compare the processes with each other, with
``metrics.jsonl`` and with the single-process maths of :mod:`eapo.core`. Test-only instrumentation:
the trainer's hooks are wrapped here, in this process, and nothing in the package knows about it.

Per generation step it records the rewards as gathered over processes, TRL's advantages and the
positive mask of this process's slice (before TRL shuffles the rows), the entropy sums this process
contributed to ``H_t``, and ``H_t``, ``w+``, ``w-``, ``H_0`` and the advantages it trained on. It
also records which run-directory writers it called and, after ``run`` returned, what it read back.

Process 1 is made a slow process, deterministically: its clock reads 2 s later (for the default
run-directory name), and it looks at the run directory 1 s after process 0 (which would by then
have written config.yaml if it did not wait for the others).
``--kill-after-save N`` ends every process with ``os._exit(137)`` right after checkpoint N (a hard
kill: no cleanup, no atexit); process 1 first waits 2 s inside its RNG-state save of that checkpoint,
so process 0 finishes first.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback
from trl import GRPOTrainer

import eapo.commands.train
import eapo.train
import eapo.trainer
from eapo.run_dir import SUMMARY_FILE, read_metrics
from eapo.trainer import EAPOTrainer

RANK = int(os.environ["RANK"])
steps: list[dict[str, Any]] = []  # one entry per generation step
writes: list[str] = []  # file names written through the run-directory writers


def _list(tensor: torch.Tensor) -> list:
    return tensor.detach().cpu().tolist()


def _wrap(owner: Any, name: str, around) -> None:
    original = getattr(owner, name)
    setattr(owner, name, functools.wraps(original)(lambda *a, **k: around(original, *a, **k)))


def _trl_generate(original, self, inputs):
    output = original(self, inputs)
    if self.model.training:
        # TRL's group-normalised advantages of this process's slice, before any EAPO weighting
        steps.append({"trl_advantages": _list(output["advantages"])})
    return output


def _eapo_generate(original, self, inputs):
    output = original(self, inputs)
    if self.model.training:
        step = steps[-1]
        step["step"] = self.state.global_step + 1
        per_func = self._gathered_rewards  # [B_all, F]: every process's rows, gathered by TRL
        step["rewards"] = _list((per_func * self.reward_weights.unsqueeze(0)).nansum(dim=1))  # [B_all]
        if "eapo_positive" in output:  # weighted later, in the loss pass (after TRL shuffles the rows)
            step["positive"] = _list(output["eapo_positive"])
    return output


def _entropy(original, self, values, mask):
    step = steps[-1]
    step["local_entropy_sum"] = float((values.detach() * mask).sum())
    step["local_tokens"] = float(mask.sum())
    step["entropy"] = original(self, values, mask)
    return step["entropy"]


def _weight(original, self, batch, positive, entropy):
    step = steps[-1]
    step.setdefault("positive", _list(positive))  # pre-shuffle unless the loss pass weights
    step["weighted_positive"] = _list(positive)
    step["weighted_input"] = _list(batch["advantages"])
    original(self, batch, positive, entropy)
    metrics = self._metrics["train"]
    step["w_pos"] = metrics["eapo/w_pos"][-1]
    step["w_neg"] = metrics["eapo/w_neg"][-1]
    step["H0"] = metrics["eapo/H0"][-1]
    step["advantages"] = _list(batch["advantages"])


def _counting(original, path, *args, **kwargs):
    writes.append(Path(path).name)
    return original(path, *args, **kwargs)


def _save_final(original, trainer, tokenizer, run_dir, *args, **kwargs):
    writes.append("final/")
    return original(trainer, tokenizer, run_dir, *args, **kwargs)


def _dump(dump_dir: Path, **extra: Any) -> None:
    dump_dir.mkdir(parents=True, exist_ok=True)
    path = dump_dir / f"rank{RANK}.json"
    path.write_text(json.dumps({"rank": RANK, "steps": steps, "writes": writes, **extra}), encoding="utf-8")


class KillAfterSave(TrainerCallback):
    def __init__(self, step: int, dump_dir: Path) -> None:
        self.step = step
        self.dump_dir = dump_dir

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            _dump(self.dump_dir, killed_at=state.global_step)
            os._exit(137)


def _slow_rng_save(step: int):
    def around(original, self, output_dir):
        if RANK == 1 and self.state.global_step == step:
            time.sleep(2.0)
        return original(self, output_dir)

    return around


def _late_on_rank_1(original, *args, **kwargs):
    if RANK == 1:
        time.sleep(1.0)
    return original(*args, **kwargs)


class _LaterClock:
    """``time`` as ``eapo.commands.train`` sees it on process 1: 2 s later than process 0's."""

    def strftime(self, fmt: str) -> str:
        return time.strftime(fmt, time.localtime(time.time() + 2.0))


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, train_args = argv[:split], argv[split + 1 :]
    dump_dir = Path(options[0])
    kill_at = int(options[options.index("--kill-after-save") + 1]) if "--kill-after-save" in options else None

    _wrap(GRPOTrainer, "_generate_and_score_completions", _trl_generate)
    _wrap(EAPOTrainer, "_generate_and_score_completions", _eapo_generate)
    # H_t from (per-token entropies, mask); the hook is named _rollout_entropy from issue 12 on
    entropy_hook = "_rollout_entropy" if hasattr(EAPOTrainer, "_rollout_entropy") else "_masked_global_mean"
    _wrap(EAPOTrainer, entropy_hook, _entropy)
    _wrap(EAPOTrainer, "_weight", _weight)
    _wrap(eapo.train, "atomic_write_text", _counting)
    _wrap(eapo.trainer, "atomic_write_text", _counting)
    _wrap(eapo.train, "_save_final", _save_final)
    _wrap(eapo.train, "_prepare_run_dir", _late_on_rank_1)
    if RANK == 1:
        eapo.commands.train.time = _LaterClock()
    callbacks: list[Any] = []
    if kill_at is not None:
        _wrap(Trainer, "_save_rng_state", _slow_rng_save(kill_at))
        callbacks.append(KillAfterSave(kill_at, dump_dir))
    returned: list[Path] = []

    def run(original, config, output_dir, **kwargs):
        returned.append(original(config, output_dir, **{**kwargs, "callbacks": callbacks}))
        return returned[-1]

    _wrap(eapo.train, "run", run)  # the command imports it when called

    from eapo.cli import app

    code = app(["train", *train_args], standalone_mode=False)
    if code:
        sys.exit(code)

    # Every process reads what the main process wrote: run() returns only once it is all in place.
    (out,) = returned
    summary = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))
    _dump(
        dump_dir,
        run_dir=str(out),
        summary_global_step=summary["global_step"],
        metric_steps=[row["step"] for row in read_metrics(out)],
        final_weights=(out / "final" / "model.safetensors").is_file(),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
