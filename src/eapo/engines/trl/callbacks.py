"""Trainer callbacks that write the run directory's ``metrics.jsonl``, TensorBoard events and the progress bar."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from eapo.run_dir import METRICS_FILE, WriteFailedError, describe_write_error, fail_together

#: Keys of the in-training validation (eapo.engines.trl.validation), logged only at the steps that validate.
VALIDATION_PREFIX = "val/"

# TRL's log keys → the contract's names (TRL's own keys are kept too).
_RENAMES = {
    "completions/mean_length": "completion/mean_length",
    "clip_ratio/region_mean": "clip_frac",
    "entropy": "entropy/train",
}


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsCallback(TrainerCallback):
    """Appends one line per optimisation step to ``metrics.jsonl`` (flushed + fsynced) and to TensorBoard."""

    def __init__(self, run_dir: Path, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.tensorboard = tensorboard
        self._writer = None
        self.last: dict[str, Any] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        with fail_together("opening TensorBoard's event file"):
            if self.tensorboard and state.is_world_process_zero and self._writer is None:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:
            return  # not an optimisation step's log (e.g. the end-of-training summary)
        # Every process logs each step; the main one alone writes, and a failed write ends them all.
        with fail_together(f"writing the metrics of step {state.global_step}"):
            if state.is_world_process_zero:
                self._write(state, logs)

    def _write(self, state, logs: dict[str, Any]) -> None:
        """Step ``state.global_step``'s line of ``metrics.jsonl`` (and its TensorBoard scalars)."""
        fresh = "entropy/rollout" in logs
        row: dict[str, Any] = {"step": state.global_step, "epoch": state.epoch, "time": time.time()}
        if not fresh:
            # A step that reuses the previous generation (num_iterations > 1): the rollout, reward and
            # weighting values in effect are those of that generation, so they are carried forward
            # (validation values are not: they belong to the step that validated).
            row.update(
                {
                    k: v
                    for k, v in self.last.items()
                    if k not in ("step", "epoch", "time") and not k.startswith(VALIDATION_PREFIX)
                }
            )
        row["rollout/fresh"] = fresh
        for key, value in logs.items():
            row[_RENAMES.get(key, key)] = _clean(value)
            if key in _RENAMES:
                row[key] = _clean(value)
        row.setdefault("kl", 0.0)  # TRL logs kl only when beta > 0
        self.last = row
        path = self.run_dir / METRICS_FILE
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as error:  # a full disk: a torn last line is ignored by read_metrics
            raise WriteFailedError(
                f"appending step {state.global_step} to {path} failed: {describe_write_error(error)}"
            ) from error
        if self._writer is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                    self._writer.add_scalar(key, value, state.global_step)
            self._writer.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class ProgressCallback(TrainerCallback):
    """A tqdm bar over optimisation steps with ETA and the live entropy, w+ and reward."""

    def __init__(self, metrics: MetricsCallback) -> None:
        self.metrics = metrics
        self.bar = None

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=state.max_steps,
                initial=state.global_step,
                desc="eapo train",
                unit="step",
                dynamic_ncols=True,
            )

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs or "loss" not in logs:
            return
        row = self.metrics.last  # this step's line (MetricsCallback runs first), with carried-forward values
        self.bar.update(state.global_step - self.bar.n)
        self.bar.set_postfix(
            H=f"{row.get('entropy/rollout', float('nan')):.3f}",
            w_pos=f"{row.get('eapo/w_pos', float('nan')):.3f}",
            reward=f"{row.get('reward/mean', float('nan')):.3f}",
            refresh=True,
        )

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
