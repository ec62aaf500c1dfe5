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
import os
import re
import tempfile
from pathlib import Path
from typing import Any

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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file, fsync and ``os.replace`` (all or nothing)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file ordinary permissions
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


def training_finished(run_dir: str | os.PathLike) -> bool:
    """Whether the run's training finished, judged from its files: ``final/`` exists, or — its weights
    gone (a new machine with only the committed small outputs) — ``metrics.jsonl`` logged the step
    ``train.max_steps`` of its ``config.yaml`` (a run without a step limit: ``summary.json`` exists,
    written at the end of training)."""
    run_dir = Path(run_dir)
    if (run_dir / FINAL_DIR).exists():
        return True
    if not (run_dir / CONFIG_FILE).exists() or not (run_dir / METRICS_FILE).exists():
        return False
    import yaml

    try:
        config = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8")) or {}
        rows = read_metrics(run_dir)
    except (OSError, ValueError, yaml.YAMLError):
        return False
    max_steps = (config.get("train") or {}).get("max_steps")
    if not isinstance(max_steps, int) or max_steps <= 0:
        return (run_dir / SUMMARY_FILE).exists()
    steps = [row.get("step") for row in rows if isinstance(row.get("step"), int)]
    return bool(steps) and max(steps) >= max_steps


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """Keep only lines with ``step <= last_step`` (used when resuming from checkpoint ``last_step``)."""
    path = run_dir / METRICS_FILE
    if not path.exists():
        return
    kept = [row for row in read_metrics(run_dir) if row.get("step", 0) <= last_step]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in kept))
