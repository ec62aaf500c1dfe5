"""The run directory: a contract that ``eapo plot``, ``eapo eval``, ``eapo sweep`` and the tests read.

::

    RUN_DIR/
      config.yaml          the resolved configuration
      metrics.jsonl        one JSON object per optimisation step, flushed and fsynced as written
      tensorboard/         TensorBoard events of the same metrics
      checkpoint-N/        TRL/transformers checkpoints (safetensors) + eapo_state.json, written last
      final/               the final model (or LoRA adapter) and tokenizer, renamed into place
      summary.json         run totals (written at the end)
      dynamics.png         the training-dynamics figure

Every ``metrics.jsonl`` line has at least the keys in :data:`REQUIRED_METRIC_KEYS` plus
``reward/<component>/mean`` for each reward component.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
EAPO_STATE_FILE = "eapo_state.json"
FINAL_DIR = "final"
SUMMARY_FILE = "summary.json"

REQUIRED_METRIC_KEYS = (
    "step",
    "entropy/rollout",
    "eapo/H0",
    "eapo/w_pos",
    "eapo/w_neg",
    "eapo/frac_positive",
    "reward/mean",
    "completion/mean_length",
    "kl",
    "loss",
    "learning_rate",
)

# TRL's log keys → the contract's names (TRL's own keys are kept too).
_RENAMES = {
    "completions/mean_length": "completion/mean_length",
    "clip_ratio/region_mean": "clip_frac",
    "entropy": "entropy/train",
}


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file, fsync and ``os.replace`` (all or nothing)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def is_run_dir(path: Path) -> bool:
    return (path / CONFIG_FILE).exists() or (path / METRICS_FILE).exists()


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoints that were fully written (they hold ``eapo_state.json``), oldest first."""
    found = []
    for child in run_dir.glob("checkpoint-*"):
        match = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if match and (child / EAPO_STATE_FILE).exists():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Parse ``metrics.jsonl``; a torn last line (a kill mid-write) is ignored, any other bad line is an error."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} an eapo run directory?")
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not valid JSON ({error})") from error
    return rows


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """Keep only lines with ``step <= last_step`` (used when resuming from checkpoint ``last_step``)."""
    path = run_dir / METRICS_FILE
    if not path.exists():
        return
    kept = [row for row in read_metrics(run_dir) if row.get("step", 0) <= last_step]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in kept))


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
        if self.tensorboard and state.is_world_process_zero and self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "entropy/rollout" not in logs:
            return
        row: dict[str, Any] = {"step": state.global_step, "epoch": state.epoch, "time": time.time()}
        for key, value in logs.items():
            row[_RENAMES.get(key, key)] = _clean(value)
            if key in _RENAMES:
                row[key] = _clean(value)
        row.setdefault("kl", 0.0)  # TRL logs kl only when beta > 0
        self.last = row
        with open(self.run_dir / METRICS_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
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
        if self.bar is None or not logs or "entropy/rollout" not in logs:
            return
        self.bar.update(state.global_step - self.bar.n)
        self.bar.set_postfix(
            H=f"{logs['entropy/rollout']:.3f}",
            w_pos=f"{logs.get('eapo/w_pos', float('nan')):.3f}",
            reward=f"{logs.get('reward/mean', logs.get('reward', float('nan'))):.3f}",
            refresh=True,
        )

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
