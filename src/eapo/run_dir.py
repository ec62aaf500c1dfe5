"""The run directory: a contract that ``eapo plot``, ``eapo eval``, ``eapo sweep`` and the tests read.

::

    RUN_DIR/
      config.yaml          the resolved configuration
      metrics.jsonl        one JSON object per optimisation step, flushed and fsynced as written
      rollouts.jsonl       with logging.rollouts = N: every Nth step's rollouts, one JSON object each
      tensorboard/         TensorBoard events of the same metrics
      checkpoint-N/        TRL/transformers checkpoints (safetensors) + eapo_state.json, written last
      final/               the final model (or LoRA adapter) and tokenizer, renamed into place
      summary.json         run totals (written at the end)
      dynamics.png         the training-dynamics figure
      .eapo.lock           held (flock) by the process writing the directory; records its pid

Every ``metrics.jsonl`` line has at least the keys in :data:`REQUIRED_METRIC_KEYS` plus
``reward/<component>/mean`` for each reward component.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eapo.core.step import STATE_FILE

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
#: ``logging.rollouts``: the rollouts of every Nth step, one object per rollout (:data:`ROLLOUT_KEYS`).
ROLLOUTS_FILE = "rollouts.jsonl"
FINAL_DIR = "final"
SUMMARY_FILE = "summary.json"
LOCK_FILE = ".eapo.lock"
#: A checkpoint's record of its own step's metrics, for an engine that logs a step after checkpointing it
#: (verl: ``global_step_N/eapo_step_metrics.json``, ``{"step": N, "data": {...}}``).
STEP_METRICS_FILE = "eapo_step_metrics.json"

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

#: The keys of every ``rollouts.jsonl`` line, on both engines: the step and where the rollout sits in it
#: (``prompt_index``: the prompt's place among the step's prompts; ``sample``: the rollout's place in its
#: group), the prompt and the completion (cut at a stop string, as the reward saw it), ``rewards``
#: (each component's raw score, None where it could not score), ``reward`` (the total, None when
#: unscored), ``advantage`` (the weighted advantage the update used), ``polarity`` ("D+", "D-", or None
#: for an unscored rollout), ``weight`` (the w+ or w- applied; None when unscored) and ``stop_reason``
#: (eapo.runtime.stop.STOP_REASONS: string, eos or cap).
ROLLOUT_KEYS = (
    "step",
    "prompt_index",
    "sample",
    "prompt",
    "completion",
    "rewards",
    "reward",
    "advantage",
    "polarity",
    "weight",
    "stop_reason",
)


#: The share of a step's rollouts that ended at the length cap, as eapo logs it (``completions/stopped_by_cap``).
CAP_SHARE_KEY = "completions/stopped_by_cap"
#: TRL's share of a step's rollouts whose last token is neither an EOS nor the pad token: a rollout that
#: ended at a stop string counts too.
CLIPPED_RATIO_KEY = "completions/clipped_ratio"


def cap_share(row: Mapping[str, Any], path: str | os.PathLike) -> Any:
    """The share of a step's rollouts cut at the length cap, ``completions/stopped_by_cap``, from a row of
    the ``metrics.jsonl`` at ``path``; ``None`` for a row that logged no rollouts' ends (neither it nor
    TRL's ``completions/clipped_ratio``). A row with ``clipped_ratio`` but no ``stopped_by_cap`` was
    written before eapo logged why each rollout ended: a ValueError naming ``path``."""
    if CAP_SHARE_KEY in row:
        return row[CAP_SHARE_KEY]
    if CLIPPED_RATIO_KEY in row:
        raise ValueError(
            f"{path}: step {row.get('step')} has {CLIPPED_RATIO_KEY} but no {CAP_SHARE_KEY} (written by an older "
            "eapo, before it logged why each rollout ended); train it again, or add completions/stopped_by_"
            "{string,eos,cap} as scripts/migrate_results_2026_11.py did to docs/results' runs"
        )
    return None


@dataclasses.dataclass(frozen=True)
class RolloutRow:
    """One rollout of a step as the trainer reads it back, before it is a ``rollouts.jsonl`` line.

    ``group``: what orders the step's prompts (the dataset row's ``index``, then verl's ``uid``);
    ``sample``: the rollout's place in its group (verl's session id, ``{uid}_{session}_{output}``);
    ``rewards``: each component's raw score (NaN for one that could not score); ``reward``: the total
    the estimator used (NaN: unscored); ``advantage``, ``positive``, ``scored``: the estimator's."""

    group: tuple[Any, ...]
    sample: int
    prompt: str
    completion: str
    rewards: Mapping[str, float]
    reward: float
    advantage: float
    positive: bool
    scored: bool
    stop_reason: str


def finite_or_none(value: Any) -> float | None:
    """A score as ``rollouts.jsonl`` writes it: None where it is None or not finite (unscored)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def rollout_records(
    step: int, rows: Sequence[RolloutRow], w_pos: float, w_neg: float
) -> list[dict[str, Any]]:
    """The ``rollouts.jsonl`` lines of step ``step`` (:data:`eapo.run_dir.ROLLOUT_KEYS`), ordered by prompt
    then sample; ``prompt_index`` is the prompt's place in that order. An unscored rollout has reward,
    polarity and weight None; a scored one is D+ (weight ``w_pos``) or D- (``w_neg``)."""
    ordered = sorted(rows, key=lambda row: (row.group, row.sample))
    places: dict[tuple[Any, ...], int] = {}
    records = []
    for row in ordered:
        places.setdefault(row.group, len(places))
        polarity = ("D+" if row.positive else "D-") if row.scored else None
        records.append(
            {
                "step": step,
                "prompt_index": places[row.group],
                "sample": row.sample,
                "prompt": row.prompt,
                "completion": row.completion,
                "rewards": {name: finite_or_none(score) for name, score in row.rewards.items()},
                "reward": finite_or_none(row.reward) if row.scored else None,
                "advantage": float(row.advantage),
                "polarity": polarity,
                "weight": None if polarity is None else (w_pos if row.positive else w_neg),
                "stop_reason": row.stop_reason,
            }
        )
    return records


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` all or nothing: into a temporary file beside it, fsynced (unless
    ``fsync=False``, for a cache whose lost entry costs nothing), then ``os.replace``d over ``path``.

    The file gets ordinary permissions (``0o666`` less the umask, which the kernel applies when the
    temporary file is created), so the umask is never changed and a thread may call this while another
    creates files.
    """
    path = Path(path)
    fd, tmp = _create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str, *, fsync: bool = True) -> None:
    """Write ``text`` (UTF-8) to ``path`` all or nothing (:func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"), fsync=fsync)


def _create_temporary(path: Path) -> tuple[int, Path]:
    """A new file ``.<name>.<random>`` beside ``path``, opened for writing, and its path (as
    ``tempfile.mkstemp`` makes one, but with mode ``0o666`` so the umask sets its permissions)."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name beside {path} after 100 tries")


class WriteFailedError(OSError):
    """Writing part of a run (a checkpoint, ``final/``) failed: a full disk, a quota, an I/O error. The
    message names the path, the cause and what was kept."""


def describe_write_error(error: BaseException) -> str:
    """``error`` as the cause of a failed write: its kind, message and the file it names."""
    if isinstance(error, OSError) and error.strerror:
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror} (errno {error.errno}){where}"
    return f"{type(error).__name__}: {error}"


class ProcessFailedError(RuntimeError):
    """Another process of a multi-process run failed a step it takes alone (a write only the main
    process makes): this one stops too, instead of waiting for it at its next collective. The message
    names that process, what it was doing and its error."""


@contextmanager
def fail_together(what: str) -> Iterator[None]:
    """Run a block that one process of a multi-process run may fail alone — a write only the main
    process makes — and end every process when any of them failed.

    Every process of the group must run the block (those with nothing to do run it empty): leaving it,
    they exchange whether they failed (one all-gather of a few bytes, which also waits for all of them,
    as a barrier does). A process that failed raises its own error, unchanged; every other raises
    :class:`ProcessFailedError` naming the first process that failed, ``what`` it was doing (``"writing
    checkpoint-2"``) and its error. Without that exchange the others would go on to their next
    collective and wait there for the failed process: until it exits, or for good where it does not.

    Without a process group (one process) the block is plain code: an error passes through unchanged.
    Only exceptions are exchanged; a ``KeyboardInterrupt`` or ``SystemExit`` ends this process at once.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        yield
        return
    try:
        yield
    except Exception as error:
        _exchange_failures(what, f"{type(error).__name__}: {error}")
        raise
    _exchange_failures(what, None)


def _exchange_failures(what: str, failure: str | None) -> None:
    """Every process's ``failure`` (``None``: it succeeded) to every process; raise
    :class:`ProcessFailedError` where this one succeeded and another did not."""
    import torch.distributed as dist

    rank, size = dist.get_rank(), dist.get_world_size()
    failures: list[str | None] = [None] * size
    dist.all_gather_object(failures, failure)
    failed = [(process, message) for process, message in enumerate(failures) if message is not None]
    if failure is not None or not failed:
        return  # this process raises its own error, or none failed
    first, message = failed[0]
    others = f" (and {len(failed) - 1} other process(es))" if len(failed) > 1 else ""
    raise ProcessFailedError(
        f"process {first} of {size}{others} failed {what}: {message}; process {rank} stops too"
    )


def is_run_dir(path: Path) -> bool:
    return (path / CONFIG_FILE).exists() or (path / METRICS_FILE).exists()


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoints that were fully written (they hold ``eapo_state.json``), oldest first."""
    found = []
    for child in run_dir.glob("checkpoint-*"):
        match = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if match and (child / STATE_FILE).exists():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def remove_incomplete_checkpoints(run_dir: Path) -> list[Path]:
    """Delete the ``checkpoint-N`` directories a failed or interrupted write left without
    ``eapo_state.json``: they are never resumed from, and TRL would otherwise write into them again."""
    complete = set(complete_checkpoints(run_dir))
    removed = []
    for child in run_dir.glob("checkpoint-*"):
        if child.is_dir() and child not in complete and re.fullmatch(r"checkpoint-\d+", child.name):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Parse ``metrics.jsonl``; a torn last line (a kill mid-write) is ignored, any other bad line is an error."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} an eapo run directory?")
    return read_jsonl(path)


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
    """Keep only the lines with ``step <= last_step`` of ``metrics.jsonl`` and ``rollouts.jsonl`` (used
    when resuming from checkpoint ``last_step``: the resumed run appends the steps after it, so neither
    file has a gap or a repeat)."""
    for name in (METRICS_FILE, ROLLOUTS_FILE):
        path = Path(run_dir) / name
        if path.exists():
            kept = [row for row in read_jsonl(path) if row.get("step", 0) <= last_step]
            atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in kept))


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Parse a JSON-lines log of eapo's (``metrics.jsonl``, ``rollouts.jsonl``); a torn last line (a kill
    mid-write) is ignored, any other bad line is an error naming the file and line."""
    path = Path(path)
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


def read_rollouts(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Parse ``rollouts.jsonl`` (see :data:`ROLLOUT_KEYS`); ``[]`` when the run wrote none."""
    path = Path(run_dir) / ROLLOUTS_FILE
    return read_jsonl(path) if path.exists() else []


def append_jsonl(path: str | os.PathLike, rows: list[dict[str, Any]], *, what: str) -> None:
    """Append ``rows`` to a JSON-lines file, flushed and fsynced before returning (a kill loses at most a
    torn last line, which the readers skip); a failed write raises :class:`WriteFailedError` naming
    ``what`` and the path."""
    path = Path(path)
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(row) + "\n" for row in rows))
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        raise WriteFailedError(f"appending {what} to {path} failed: {describe_write_error(error)}") from error


class DirectoryBusyError(RuntimeError):
    """Another live process holds the directory's lock; the message names it."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


class DirectoryLock:
    """An exclusive lock on a directory that one process writes (a run, an evaluation).

    ``flock`` on ``DIR/.eapo.lock``, which records the holder's pid, host, command and start time. The
    kernel drops a flock when its process dies, however it dies, so the file a killed process left
    behind blocks nobody: the next process takes the lock and overwrites the record. Releasing unlinks
    the file while still holding it; a process that opened the old file meanwhile sees that the path
    no longer names what it locked and tries again, so two holders never coexist.

    ``acquire`` creates the directory (and its parents) when missing.
    """

    def __init__(self, directory: str | os.PathLike, command: str) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self.command = command
        self._fd: int | None = None

    def acquire(self) -> DirectoryLock:
        self.directory.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise self._busy(holder) from None
            try:
                current = os.stat(self.path).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                break
            os.close(fd)  # the holder released (unlinked) the file we opened: take the new one
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._fd = fd
        return self

    def _busy(self, holder: dict[str, Any]) -> DirectoryBusyError:
        pid = holder.get("pid")
        who = f"process {pid}" if pid else "another process"
        if holder.get("host") and holder.get("host") != socket.gethostname():
            who += f" on {holder['host']}"
        what = f" ({holder['command']}, since {holder.get('started', '?')})" if holder.get("command") else ""
        return DirectoryBusyError(
            f"{self.directory} is being written by {who}{what}, which holds {self.path}; wait for it to "
            f"finish or stop it{f' (kill {pid})' if pid else ''}, then run again (a lock left by a killed "
            "process does not block)",
            pid if isinstance(pid, int) else None,
        )

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)  # while still held: see the class docstring
        finally:
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def write_step_state(folder: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    """Write the run's step state (:meth:`eapo.core.EAPOStep.state_dict`) into a checkpoint folder as
    :data:`eapo.core.STATE_FILE`, atomically: both engines' one writer of it."""
    path = Path(folder) / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(state, indent=2, sort_keys=True))
    return path


def read_step_state(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The step state a checkpoint folder holds (:func:`write_step_state`).

    Raises:
        FileNotFoundError: the folder has no state file (a checkpoint cut off while saving).
        ValueError: the file is not a JSON object; the message names it.
    """
    path = Path(folder) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: the checkpoint is incomplete (the run was killed while saving); "
            "delete it to resume from the previous one"
        )
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path} is not valid JSON ({error}); delete the checkpoint to resume from the previous one"
        ) from None
    if not isinstance(state, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(state).__name__}")
    return state
