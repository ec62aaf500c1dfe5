"""``eapo sweep``: train every (method, weights, seed) configuration, evaluate each, and write the
EAPO paper's comparison and sensitivity tables and the overlaid training-dynamics figure.

Grid semantics (``--grid KEY=V1,V2,...``, repeatable; values are floats):

* ``w_pos`` / ``w_neg`` apply to ``w_reinforce`` — the paper's fixed asymmetric weights (its
  "Performance under different positive/negative reward weight configurations" and the W-REINFORCE
  rows of "Sensitivity"). GRPO, PSR and NSR *are* particular fixed weights, so a grid does not vary them.
* ``w0`` / ``w_min`` / ``w_max`` apply to ``eapo`` (the EAPO rows of "Sensitivity").
* ``METHOD.KEY=...`` targets one method explicitly (any key it accepts, e.g. ``eapo.w_neg=0.5,1``).
* Several axes for the same method form a Cartesian product. The paper's fixed-weight table is two
  one-dimensional sweeps (w+ varied at w−=1, w− varied at w+=1); run them as two ``eapo sweep``
  invocations into the same ``--output-dir`` (``--methods grpo,psr,nsr,w_reinforce --grid
  w_reinforce.w_pos=1 --grid w_neg=0.05,0.1,0.2,5``, then ``--methods w_reinforce --grid
  w_pos=0.05,0.1,0.2,5``): the tables cover every run recorded there.

So ``--methods grpo,psr,nsr,w_reinforce,eapo --grid w_pos=0.05,0.1,0.2 --grid w0=0.05,0.1,0.2`` is the
paper's main comparison plus its sensitivity study (9 runs per seed).

Layout of ``--output-dir``::

    sweep.json                 the manifest: every run, its overrides, status and error (merged across invocations)
    base.yaml, base/           the base config (with the pass-through overrides) and the base model's evaluation
    runs/<name>/               one run directory per configuration (eapo train), with eval/ (eapo eval)
    logs/<name>.{train,eval}.log
    comparison.md / .csv       the paper's "Performance comparison" table (base model first; Avg over
                               Rouge-L, Reranker, RL@k, RR@k), and with a judge its LAAJ layout
                               (Avg over Rouge-L, Reranker, LAAJ)
    sensitivity.md / .csv      per method and varied weight: one row per value and Range = max − min
                               (Rouge-L, Reranker; ``--side-by-side DIR`` adds another sweep's dataset)
    fixed_weights.md / .csv    PSR, NSR, GRPO and the W-REINFORCE blocks with w+, w− and w+/w−
    dynamics.png / .svg        the overlaid training dynamics

Weights that the base config or a pass-through override sets but a method does not take are dropped
for that method (``configs/demo.yaml`` sets EAPO's ``w0``; a ``grpo`` run gets ``algorithm.w0=null``);
an override that no method in ``--methods`` takes is an error.

Each run is a subprocess (``python -m eapo.cli train`` / ``eval``): a failed run is recorded with the
tail of its log and the sweep moves on; the command exits non-zero at the end if any run failed. A
run whose ``final/`` and ``eval/results.json`` exist is skipped; a run directory left by a crash is
resumed (``eapo train --resume``); a run directory trained with a different configuration stops the
sweep before anything starts (naming the differing keys).
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import functools
import itertools
import json
import math
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from eapo.core import WEIGHTING_SCHEMES
from eapo.evaluation.labels import METHOD_NAMES, METHOD_ORDER, effective_weights, method_label
from eapo.evaluation.metrics import METRIC_KEYS
from eapo.evaluation.report import (
    avg_note,
    column_title,
    csv_text,
    format_value,
    has_laaj,
    markdown_table,
    reported_columns,
    stand_in_columns,
    table_notes,
    upgrade_results,
)
from eapo.run_dir import atomic_write_text

__all__ = [
    "GRID_KEYS",
    "GRID_TARGETS",
    "GridAxis",
    "SweepRun",
    "EvalOptions",
    "SweepError",
    "RunFailed",
    "SubprocessRunner",
    "SweepReport",
    "parse_grid",
    "plan_runs",
    "run_sweep",
    "update_manifest",
    "comparison_table",
    "sensitivity_table",
    "Entry",
]

#: Weights a grid can vary.
GRID_KEYS = ("w_pos", "w_neg", "w0", "w_min", "w_max")
#: Every per-method weighting key of ``algorithm`` (dropped for methods that do not take them).
WEIGHT_KEYS = (*GRID_KEYS, "anchor_steps")
#: The methods an unscoped ``--grid KEY=...`` varies (see the module docstring).
GRID_TARGETS: dict[str, tuple[str, ...]] = {
    "w_pos": ("w_reinforce",),
    "w_neg": ("w_reinforce",),
    "w0": ("eapo",),
    "w_min": ("eapo",),
    "w_max": ("eapo",),
}
_SYMBOLS = {"w_pos": "w+", "w_neg": "w−", "w0": "w0", "w_min": "w_min", "w_max": "w_max"}
MANIFEST = "sweep.json"


class SweepError(ValueError):
    """The sweep cannot start (bad grid, bad config, a run directory with another configuration)."""


class RunFailed(RuntimeError):
    """One training or evaluation subprocess failed; the message holds the tail of its log."""


# --------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GridAxis:
    """One ``--grid``: a weight, its values, and the methods it varies."""

    key: str
    values: tuple[float, ...]
    methods: tuple[str, ...]
    scoped: bool = False


def parse_grid(spec: str) -> GridAxis:
    """``"w_pos=0.05,0.1"`` or ``"eapo.w_neg=0.5,1"`` -> :class:`GridAxis`."""
    if "=" not in spec:
        raise SweepError(
            f"--grid {spec!r} must look like KEY=V1,V2 (e.g. w_pos=0.05,0.1,0.2 or eapo.w0=0.1,0.2)"
        )
    target, _, raw = spec.partition("=")
    target = target.strip()
    method, _, key = target.rpartition(".")
    if key not in GRID_KEYS:
        raise SweepError(f"--grid {spec!r}: {key!r} is not a grid key; valid: {', '.join(GRID_KEYS)}")
    try:
        values = tuple(float(v) for v in raw.split(",") if v.strip())
    except ValueError:
        raise SweepError(f"--grid {spec!r}: values must be comma-separated numbers") from None
    if not values:
        raise SweepError(f"--grid {spec!r} has no values")
    if len(set(values)) != len(values):
        raise SweepError(f"--grid {spec!r} repeats a value")
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise SweepError(f"--grid {spec!r}: weights must be finite and >= 0")
    if method:
        if method not in WEIGHTING_SCHEMES:
            raise SweepError(
                f"--grid {spec!r}: unknown method {method!r}; valid: {', '.join(WEIGHTING_SCHEMES)}"
            )
        if key not in WEIGHTING_SCHEMES[method][1]:
            raise SweepError(
                f"--grid {spec!r}: method {method!r} does not take {key}; it accepts {', '.join(WEIGHTING_SCHEMES[method][1])}"
            )
        return GridAxis(key, values, (method,), scoped=True)
    return GridAxis(key, values, GRID_TARGETS[key])


@dataclass(frozen=True)
class SweepRun:
    """One configuration of the sweep: a method, the grid weights it overrides, and a seed."""

    method: str
    weights: tuple[tuple[str, float], ...] = ()
    seed: int | None = None

    @property
    def name(self) -> str:
        parts = [self.method] + [f"{key}{value:g}" for key, value in self.weights]
        if self.seed is not None:
            parts.append(f"seed{self.seed}")
        return "-".join(parts)

    @property
    def overrides(self) -> list[str]:
        items = [f"algorithm.method={self.method}"] + [
            f"algorithm.{key}={value!r}" for key, value in self.weights
        ]
        if self.seed is not None:
            items.append(f"train.seed={self.seed}")
        return items

    @property
    def label(self) -> str:
        return method_label(self.method, dict(self.weights))


def plan_runs(
    methods: Sequence[str], grids: Sequence[GridAxis | str] = (), seeds: Sequence[int] | None = None
) -> list[SweepRun]:
    """Every configuration: per method, the product of the grid axes that vary it, times the seeds."""
    methods = list(dict.fromkeys(methods))
    if not methods:
        raise SweepError("--methods is empty; e.g. --methods grpo,psr,nsr,w_reinforce,eapo")
    unknown = [m for m in methods if m not in WEIGHTING_SCHEMES]
    if unknown:
        raise SweepError(f"--methods: unknown {unknown}; valid: {', '.join(WEIGHTING_SCHEMES)}")
    axes = [parse_grid(g) if isinstance(g, str) else g for g in grids]
    for axis in axes:
        if not set(axis.methods) & set(methods):
            raise SweepError(
                f"--grid {axis.key}=... varies {', '.join(axis.methods)}, which is not in --methods {','.join(methods)}"
            )
    seen_keys: dict[tuple[str, str], GridAxis] = {}
    for axis in axes:
        for method in axis.methods:
            if (method, axis.key) in seen_keys:
                raise SweepError(
                    f"two --grid options vary {axis.key} of {method}; give all its values in one --grid"
                )
            seen_keys[(method, axis.key)] = axis
    seed_list: list[int | None] = list(dict.fromkeys(seeds)) if seeds else [None]
    runs = []
    for method in methods:
        mine = [axis for axis in axes if method in axis.methods]
        for values in itertools.product(*[axis.values for axis in mine]):
            weights = tuple(sorted(zip([axis.key for axis in mine], values, strict=True)))
            for seed in seed_list:
                runs.append(SweepRun(method, weights, seed))
    return runs


@dataclass
class EvalOptions:
    """What ``eapo eval`` is run with for every configuration (and the base model)."""

    k: int = 8
    limit: int | None = None
    split: str = "dev"
    temperature: float | None = None
    max_new_tokens: int | None = None
    batch_size: int | None = None
    backend: str = "auto"
    scorers: str | None = None
    reranker_backend: str | None = None
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_api_key_env: str | None = None
    seed: int = 0

    def cli_args(self) -> list[str]:
        args = [
            "--k",
            str(self.k),
            "--split",
            self.split,
            "--backend",
            self.backend,
            "--seed",
            str(self.seed),
        ]
        optional = {
            "--limit": self.limit,
            "--temperature": self.temperature,
            "--max-new-tokens": self.max_new_tokens,
            "--batch-size": self.batch_size,
            "--scorers": self.scorers,
            "--reranker-backend": self.reranker_backend,
            "--judge-base-url": self.judge_base_url,
            "--judge-model": self.judge_model,
            "--judge-api-key-env": self.judge_api_key_env,
        }
        for flag, value in optional.items():
            if value is not None:
                args += [flag, str(value)]
        return args

    def matches(self, results: Mapping[str, Any]) -> bool:
        """Whether an existing ``results.json`` was produced with these options (then it is reused)."""
        settings = results.get("settings", {})
        checks = [
            # results.json from before the explicit Avg column sets (no avg_laaj) is recomputed from
            # its stored samples (nothing is generated again)
            "avg_laaj" in results.get("metrics", {}),
            results.get("k") == self.k,
            settings.get("split") == self.split,
            settings.get("limit") == self.limit,
        ]
        if self.temperature is not None:
            checks.append(settings.get("temperature") == self.temperature)
        if self.max_new_tokens is not None:
            checks.append(settings.get("max_new_tokens") == self.max_new_tokens)
        labels = results.get("labels", {})
        requested = [
            name.strip() for name in (self.scorers or "rouge_l,reranker,format").split(",") if name.strip()
        ]
        if self.judge_base_url is not None:
            requested.append("laaj")
        checks.append(all(name in labels for name in requested))
        if self.reranker_backend == "cross-encoder" and "reranker" in labels:
            checks.append("stand-in" not in labels["reranker"])
        return all(checks)


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


class Runner(Protocol):
    def train(
        self, base_config: Path, overrides: list[str], run_dir: Path, *, resume: bool, log: Path
    ) -> None: ...

    def evaluate(self, args: list[str], log: Path) -> None: ...


def _tail(path: Path, lines: int = 12) -> str:
    if not path.exists():
        return "(no log)"
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:])


class SubprocessRunner:
    """Runs ``eapo train`` / ``eapo eval`` as subprocesses (isolation: one failure cannot take the sweep down).

    Args:
        launcher: the command that runs a Python module, default ``[sys.executable]``; e.g.
            ``accelerate launch --num_processes 4`` to train each configuration on 4 GPUs.
        env: extra environment variables.
    """

    def __init__(self, launcher: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> None:
        self.launcher = list(launcher) if launcher else [sys.executable]
        self.env = {**os.environ, **(env or {})}

    def _run(self, command: list[str], log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w", encoding="utf-8") as out:
            out.write("$ " + shlex.join(command) + "\n")
            out.flush()
            code = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, env=self.env, check=False
            ).returncode
        if code != 0:
            raise RunFailed(f"exit code {code}; last lines of {log}:\n{_tail(log)}")

    def train(
        self, base_config: Path, overrides: list[str], run_dir: Path, *, resume: bool, log: Path
    ) -> None:
        command = [
            *self.launcher,
            "-m",
            "eapo.cli",
            "train",
            "--config",
            str(base_config),
            "--output-dir",
            str(run_dir),
        ]
        if resume:
            command.append("--resume")
        self._run(command + list(overrides), log)

    def evaluate(self, args: list[str], log: Path) -> None:
        self._run([sys.executable, "-m", "eapo.cli", "eval", *args], log)


@dataclass
class Entry:
    """One configuration's evaluation(s) for the tables: one results dict per seed."""

    name: str
    method: str | None  # None: the base model
    label: str
    weights: dict[str, float]
    results: list[dict[str, Any]]
    runs: list[str] = field(default_factory=list)


@dataclass
class SweepReport:
    output_dir: Path
    statuses: dict[str, str]
    failures: dict[str, str]
    files: list[Path]


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


def update_manifest(
    path: Path, header: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Merge ``header`` (top-level keys) and ``runs`` (per-run fields) into the manifest at ``path``.

    Read, merge and the atomic write happen under an exclusive lock on ``path.lock``, so concurrent
    writers (the threads of ``--jobs``, or two ``eapo sweep`` processes on one directory) never lose
    each other's records. Returns the manifest as written.
    """
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a", encoding="utf-8") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
        try:
            manifest = _read_json(path) or {"runs": {}}
            manifest.setdefault("runs", {})
            manifest.update(header)
            for name, fields in runs.items():
                manifest["runs"].setdefault(name, {}).update(fields)
            atomic_write_text(path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        finally:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)
    return manifest


def _config_diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            out += _config_diff(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} (existing) vs {new!r} (this sweep)"]


def run_sweep(
    base_config: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    methods: Sequence[str],
    grids: Sequence[GridAxis | str] = (),
    seeds: Sequence[int] | None = None,
    overrides: Sequence[str] = (),
    eval_options: EvalOptions | None = None,
    include_base: bool = True,
    runner: Runner | None = None,
    echo: Callable[[str], None] = print,
    side_by_side: Sequence[str | os.PathLike] = (),
    jobs: int = 1,
) -> SweepReport:
    """Train and evaluate every planned configuration, then write the tables and the figure.

    Args:
        base_config: the training config every run starts from.
        output_dir: the sweep directory (see the module docstring).
        methods, grids, seeds: what to run (see :func:`plan_runs`).
        overrides: ``key=value`` applied to every run (and to the base model's evaluation config).
        eval_options: passed to every ``eapo eval``.
        include_base: also evaluate the base model (the tables' first row).
        runner: how train/eval are executed (default :class:`SubprocessRunner`).
        echo: progress messages.
        side_by_side: other sweep directories (the same grid on another dataset) shown next to
            this one in the sensitivity table.
        jobs: configurations run at the same time (each its own subprocesses; on one GPU they share
            it, which pays off when a small model leaves it idle between kernel launches). The base
            model's evaluation counts as one job.
    """
    from eapo.config import ConfigError, dump_config, load_config, parse_overrides

    base_config = Path(base_config)
    output_dir = Path(output_dir)
    eval_options = eval_options or EvalOptions()
    runner = runner or SubprocessRunner()
    runs = plan_runs(methods, grids, seeds)
    for other in side_by_side:
        if not (Path(other) / MANIFEST).is_file():
            raise SweepError(
                f"--side-by-side {other}: no {MANIFEST} there; pass a directory written by `eapo sweep`"
            )
    if jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {jobs}")

    # 1. Every configuration is built and validated before anything runs.
    try:
        base = load_config(base_config, list(overrides))
        base_algorithm = (yaml.safe_load(base_config.read_text(encoding="utf-8")) or {}).get(
            "algorithm"
        ) or {}
        override_algorithm = parse_overrides(list(overrides)).get("algorithm") or {}
    except (ConfigError, yaml.YAMLError, OSError) as error:
        raise SweepError(f"base config: {error}") from None
    for key in WEIGHT_KEYS:
        if key in override_algorithm and not any(
            key in WEIGHTING_SCHEMES[m][1] for m in {r.method for r in runs}
        ):
            raise SweepError(
                f"override algorithm.{key}={override_algorithm[key]} applies to none of the methods "
                f"{', '.join(sorted({r.method for r in runs}))}"
            )
    set_weights = {
        key for key in WEIGHT_KEYS if base_algorithm.get(key) is not None or key in override_algorithm
    }
    planned: dict[str, tuple[SweepRun, list[str], str]] = {}
    for run in runs:
        # Weights the base config (or an override) sets for another method are dropped for this one:
        # demo.yaml's w0 means nothing to grpo.
        accepted = WEIGHTING_SCHEMES[run.method][1]
        dropped = [f"algorithm.{key}=null" for key in sorted(set_weights - set(accepted))]
        run_overrides = [*overrides, *dropped, *run.overrides]
        try:
            config = load_config(base_config, run_overrides)
        except ConfigError as error:
            raise SweepError(f"run {run.name}: {error}") from None
        planned[run.name] = (run, run_overrides, dump_config(config))
    conflicts = []
    for name, (_, _, text) in planned.items():
        existing = output_dir / "runs" / name / "config.yaml"
        if existing.exists() and existing.read_text(encoding="utf-8") != text:
            diff = _config_diff(yaml.safe_load(existing.read_text(encoding="utf-8")), yaml.safe_load(text))
            conflicts.append(f"{existing.parent}: " + ("; ".join(diff[:5]) or "formatting differs"))
    if conflicts:
        raise SweepError(
            "run directories exist with a different configuration (use another --output-dir, or delete them):\n  "
            + "\n  ".join(conflicts)
        )

    output_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = output_dir / MANIFEST
    header = {
        "base_config": str(base_config),
        "overrides": list(overrides),
        "eval": eval_options.cli_args(),
        "updated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    # Every planned run is registered up front, in plan order (the tables list seeds in this order).
    manifest = update_manifest(
        manifest_path,
        header,
        {
            name: {
                "method": run.method,
                "weights": dict(run.weights),
                "seed": run.seed,
                "label": run.label,
                "run_dir": f"runs/{name}",
                "overrides": run_overrides,
            }
            for name, (run, run_overrides, _) in planned.items()
        },
    )
    lock = threading.Lock()  # guards statuses, failures, echo and this process's manifest writes

    def record_run(name: str, fields: dict[str, Any]) -> None:
        nonlocal manifest
        with lock:
            manifest = update_manifest(manifest_path, {}, {name: fields})

    def say(message: str) -> None:
        with lock:
            echo(message)

    statuses: dict[str, str] = {}
    failures: dict[str, str] = {}
    logs = output_dir / "logs"
    eval_args = eval_options.cli_args()

    def evaluate(name: str, model_args: list[str], eval_dir: Path) -> bool:
        """Run ``eapo eval`` unless ``eval_dir`` holds results made with the same options; True if it ran."""
        existing = _read_json(eval_dir / "results.json")
        if existing is not None and eval_options.matches(existing):
            return False
        runner.evaluate([*model_args, "--output-dir", str(eval_dir), *eval_args], logs / f"{name}.eval.log")
        return True

    # 2. The base model's evaluation: every table starts from it.
    def base_job() -> None:
        base_yaml = output_dir / "base.yaml"
        atomic_write_text(base_yaml, dump_config(base))
        try:
            ran = evaluate("base", ["--config", str(base_yaml)], output_dir / "base")
            with lock:
                statuses["base"] = "evaluated" if ran else "skipped"
            say(f"[base] {base.model.name_or_path}: {'evaluated' if ran else 'skipped (finished)'}")
        except RunFailed as error:
            with lock:
                failures["base"] = f"evaluation failed: {error}"
                statuses["base"] = "failed"
            say(f"[base] FAILED (evaluation); see {logs / 'base.eval.log'}")

    # 3. Each configuration: train (or resume, or skip), then evaluate (or skip).
    def run_job(index: int, name: str, run: SweepRun, run_overrides: list[str]) -> None:
        run_dir = output_dir / "runs" / name
        prefix = f"[{index}/{len(planned)}] {name}"
        actions = []
        try:
            if not (run_dir / "final").exists():
                resume = (run_dir / "config.yaml").exists() or (run_dir / "metrics.jsonl").exists()
                say(f"{prefix}: {'resuming' if resume else 'training'} {run.label}")
                train_log = logs / f"{name}.train.log"
                runner.train(base_config, run_overrides, run_dir, resume=resume, log=train_log)
                actions.append("resumed" if resume else "trained")
            if evaluate(name, ["--model", str(run_dir)], run_dir / "eval"):
                actions.append("evaluated")
            with lock:
                statuses[name] = ", ".join(actions) or "skipped (finished)"
            say(f"{prefix}: {statuses[name]}")
            record_run(name, {"status": "done", "error": None})
        except RunFailed as error:
            stage = "training" if not (run_dir / "final").exists() else "evaluation"
            with lock:
                failures[name] = f"{stage} failed: {error}"
                statuses[name] = "failed"
            record_run(name, {"status": "failed", "error": failures[name]})
            say(
                f"{prefix}: FAILED ({stage}); see {logs / (name + ('.train.log' if stage == 'training' else '.eval.log'))}"
            )

    tasks: list[Callable[[], None]] = [base_job] if include_base else []
    for index, (name, (run, run_overrides, _)) in enumerate(planned.items(), start=1):
        tasks.append(functools.partial(run_job, index, name, run, run_overrides))
    if jobs == 1:
        for task in tasks:
            task()
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="eapo-sweep") as pool:
            for future in [pool.submit(task) for task in tasks]:
                future.result()  # anything but RunFailed (a bug, Ctrl-C) propagates

    # 4. Tables and figure over every run recorded in this directory (by any process).
    manifest = update_manifest(manifest_path, {}, {})
    reported_failures = {
        name: record["error"] for name, record in manifest["runs"].items() if record.get("status") == "failed"
    }
    if "base" in failures:
        reported_failures["base"] = failures["base"]
    files = write_reports(
        output_dir, manifest, include_base=include_base, failures=reported_failures, side_by_side=side_by_side
    )
    for path in files:
        echo(f"wrote {path}")
    return SweepReport(output_dir=output_dir, statuses=statuses, failures=failures, files=files)


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------

#: The columns of the paper's Sensitivity and fixed-weight (w+/w−) tables.
PAPER_WEIGHT_COLUMNS = ("rouge_l", "reranker")
#: The fixed-weight table's named rows, in the paper's order (W-REINFORCE follows in blocks).
FIXED_ROWS = ("psr", "nsr", "grpo")


def _sort_key(entry: Entry) -> tuple:
    if entry.method is None:
        return (-1, ())
    order = METHOD_ORDER.index(entry.method) if entry.method in METHOD_ORDER else len(METHOD_ORDER)
    return (order, tuple(sorted(entry.weights.items())))


def collect_entries(
    output_dir: Path, manifest: Mapping[str, Any], *, include_base: bool = True
) -> list[Entry]:
    """Group the finished evaluations of the manifest's runs by configuration (seeds pooled)."""
    grouped: dict[tuple, Entry] = {}
    seen: set[tuple] = set()
    for name, record in manifest.get("runs", {}).items():
        results = _read_json(output_dir / "runs" / name / "eval" / "results.json")
        if results is None:
            continue
        method = record["method"]
        weights = effective_weights(method, record.get("weights") or {})
        key = (method, tuple(sorted(weights.items())))
        # The same configuration and seed reached twice (e.g. `w_reinforce` with its default w+ and
        # a grid point w_pos=0.1 in a later sweep) is one run, not two seeds.
        if (key, record.get("seed")) in seen:
            continue
        seen.add((key, record.get("seed")))
        entry = grouped.setdefault(
            key, Entry(name, method, method_label(method, record.get("weights")), weights, [])
        )
        entry.results.append(upgrade_results(results))
        entry.runs.append(name)
    entries = sorted(grouped.values(), key=_sort_key)
    base = _read_json(output_dir / "base" / "results.json") if include_base else None
    if base is not None:
        entries.insert(
            0, Entry("base", None, "Base model (before training)", {}, [upgrade_results(base)], ["base"])
        )
    return entries


def _summary(entry: Entry, key: str) -> tuple[float | None, list[float] | None, float | None]:
    """(value, ci, sd): one seed -> its value and CI; several -> mean and standard deviation over seeds."""
    values = [r["metrics"].get(key) for r in entry.results if r["metrics"].get(key) is not None]
    if not values:
        return None, None, None
    if len(entry.results) == 1:
        return values[0], entry.results[0]["ci95"].get(key), None
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, None, sd


def _cell(value: float | None, ci: list[float] | None, sd: float | None, bold: bool = False) -> str:
    if value is None:
        return "–"
    text = f"**{value:.3f}**" if bold else f"{value:.3f}"
    if sd is not None:
        return f"{text} ± {sd:.3f}"
    if ci is not None:
        return f"{text} [{ci[0]:.3f}, {ci[1]:.3f}]"
    return text


def _all_results(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    return [r for e in entries for r in e.results]


def _common_k(results: Sequence[Mapping[str, Any]]) -> int | None:
    ks = {r.get("k") for r in results}
    return ks.pop() if len(ks) == 1 else None


def _labels(results: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each scorer's label; distinct labels across the evaluations are all listed (so a column that
    mixes the stand-in with the cross-encoder is still marked †)."""
    labels: dict[str, list[str]] = {}
    for r in results:
        for name, label in r.get("labels", {}).items():
            if label not in labels.setdefault(name, []):
                labels[name].append(label)
    return {name: " | ".join(found) for name, found in labels.items()}


def _comparison_rows(entries: Sequence[Entry], columns: Sequence[str]) -> list[list[str]]:
    """One row per entry; the best trained value per column is bold."""
    trained = [e for e in entries if e.method is not None]
    best = {}
    for column in columns:
        values = [_summary(e, column)[0] for e in trained]
        values = [v for v in values if v is not None]
        best[column] = max(values) if values else None
    rows = []
    for entry in entries:
        row = [entry.label + (f" ({len(entry.results)} seeds)" if len(entry.results) > 1 else "")]
        for column in columns:
            value, ci, sd = _summary(entry, column)
            is_best = (
                entry.method is not None and value is not None and len(trained) > 1 and value == best[column]
            )
            row.append(_cell(value, ci, sd, bold=is_best))
        rows.append(row)
    return rows


def comparison_table(
    entries: Sequence[Entry], *, failures: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The paper's "Performance comparison" table (Rouge-L, Reranker, RL@k, RR@k, Avg), and, when a
    judge ran, its LLM-as-a-Judge layout (Rouge-L, Reranker, LAAJ, Avg over those three):
    ``(markdown, csv)``. The best trained value per column is bold."""
    results = _all_results(entries)
    k = _common_k(results)
    labels = _labels(results)
    flagged = stand_in_columns(labels)
    judged = has_laaj(results)
    n_prompts = sorted({r.get("n_prompts") for r in results})
    first = results[0] if results else {}
    lines = [
        "# Performance comparison",
        "",
        f"Data: {first.get('data', '?')}; {', '.join(map(str, n_prompts))} prompts; k = {k} samples per prompt. "
        "Cells: value [95% bootstrap CI over prompts]; with several seeds: mean ± sd over seeds. "
        "Bold: best trained configuration.",
        "",
    ]
    layouts = [("avg", "")] + ([("avg_laaj", "## With LLM-as-a-Judge")] if judged else [])
    for avg, title in layouts:
        columns = reported_columns(results, avg)
        header = ["Methods"] + [column_title(c, k) + ("†" if c in flagged else "") for c in columns]
        if title:
            lines += [title, ""]
        rows = _comparison_rows(entries, columns)
        lines.append(markdown_table(header, rows) if rows else "(no finished evaluation yet)\n")
    lines += [
        f"Rouge-L / Reranker / LAAJ: mean over the k samples; RL@{k} / RR@{k}: best of the k samples.",
        "",
        ("Performance comparison: " if judged else "") + avg_note("avg", k),
    ]
    if judged:
        lines += ["", "With LLM-as-a-Judge: " + avg_note("avg_laaj", k)]
    lines += [""]
    lines += [f"- {note}" for note in table_notes(results, labels)]
    if failures:
        lines += ["", "Failed runs (not in the table):"] + [
            f"- {name}: {message.splitlines()[0]}" for name, message in failures.items()
        ]
    csv_header = ["row", "method", "label", *GRID_KEYS, "n_seeds", "runs"]
    for column in METRIC_KEYS:  # the CSV keeps every column (empty = not measured) for a stable schema
        csv_header += [column, f"{column}_ci_low", f"{column}_ci_high", f"{column}_sd"]
    csv_rows = []
    for entry in entries:
        row: list[Any] = [
            entry.name if entry.method is None else entry.runs[0],
            entry.method or "base",
            entry.label,
        ]
        row += [entry.weights.get(key) for key in GRID_KEYS]
        row += [len(entry.results), ";".join(entry.runs)]
        for column in METRIC_KEYS:
            value, ci, sd = _summary(entry, column)
            row += [value, ci[0] if ci else None, ci[1] if ci else None, sd]
        csv_rows.append(row)
    return "\n".join(lines) + "\n", csv_text(csv_header, csv_rows)


def sensitivity_blocks(entries: Sequence[Entry]) -> list[tuple[str, str, str, list[tuple[float, Entry]]]]:
    """``[(method, varied key, fixed description, [(value, entry), ...])]`` for every weight a method was
    run with at two or more values while its other weights were held fixed."""
    blocks = []
    by_method: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.method is not None:
            by_method.setdefault(entry.method, []).append(entry)
    for method in sorted(by_method, key=lambda m: METHOD_ORDER.index(m) if m in METHOD_ORDER else 99):
        group = by_method[method]
        for key in GRID_KEYS:
            if key not in group[0].weights:
                continue
            by_rest: dict[tuple, list[tuple[float, Entry]]] = {}
            for entry in group:
                rest = tuple((k, v) for k, v in sorted(entry.weights.items()) if k != key and k in GRID_KEYS)
                by_rest.setdefault(rest, []).append((entry.weights[key], entry))
            for rest, members in by_rest.items():
                if len({value for value, _ in members}) < 2:
                    continue
                defaults = effective_weights(method)
                shown = [(k, v) for k, v in rest if method == "w_reinforce" or v != defaults.get(k)]
                fixed = ", ".join(f"{_SYMBOLS.get(k, k)}={v:g}" for k, v in shown)
                blocks.append((method, key, fixed, sorted(members, key=lambda item: item[0])))
    return blocks


def _data_label(entries: Sequence[Entry]) -> str:
    data = [r.get("data") for r in _all_results(entries) if r.get("data")]
    return str(data[0]) if data else "?"


def sensitivity_table(entries: Sequence[Entry] | Mapping[str, Sequence[Entry]]) -> tuple[str, str]:
    """The paper's "Sensitivity" table: per method and varied weight, one row per value and
    ``Range (max−min)`` per metric, with Rouge-L and Reranker per dataset. ``(markdown, csv)``.

    Args:
        entries: one sweep's entries, or ``{dataset label: entries}`` for several datasets side by
            side (the paper puts RJUA and CMD next to each other).
    """
    datasets: dict[str, list[Entry]] = (
        {name: [e for e in group if e.method is not None] for name, group in entries.items()}
        if isinstance(entries, Mapping)
        else {_data_label(entries): [e for e in entries if e.method is not None]}
    )
    results = [r for group in datasets.values() for r in _all_results(group)]
    labels = _labels(results)
    flagged = {name: stand_in_columns(_labels(_all_results(group))) for name, group in datasets.items()}
    side_by_side = len(datasets) > 1
    # Blocks merged over datasets: (method, varied, fixed) -> {dataset: {value: entry}}.
    merged: dict[tuple[str, str, str], dict[str, dict[float, Entry]]] = {}
    for name, group in datasets.items():
        for method, key, fixed, members in sensitivity_blocks(group):
            merged.setdefault((method, key, fixed), {})[name] = dict(members)
    columns = [(name, column) for name in datasets for column in PAPER_WEIGHT_COLUMNS]
    header = ["Methods"] + [
        column_title(column, None)
        + ("†" if column in flagged[name] else "")
        + (f" ({name})" if side_by_side else "")
        for name, column in columns
    ]
    rows: list[list[str]] = []
    csv_rows: list[list[Any]] = []
    for (method, key, fixed), by_data in merged.items():
        title = f"*{METHOD_NAMES.get(method, method)}, {_SYMBOLS[key]} varied" + (
            f" ({fixed})*" if fixed else "*"
        )
        rows.append([title] + [""] * len(columns))
        values = sorted({value for members in by_data.values() for value in members})
        for value in values:
            row = [f"{_SYMBOLS[key]}={value:g}"]
            for name, column in columns:
                entry = by_data.get(name, {}).get(value)
                row.append(_cell(*_summary(entry, column)) if entry is not None else "–")
            rows.append(row)
            for name, members in by_data.items():
                if value in members:
                    summaries = [_summary(members[value], column)[0] for column in METRIC_KEYS]
                    csv_rows.append([name, method, key, fixed, value, *summaries])
        ranges: dict[tuple[str, str], float | None] = {}
        for name in datasets:
            members = by_data.get(name, {})
            for column in METRIC_KEYS:
                found = [_summary(entry, column)[0] for entry in members.values()]
                found = [v for v in found if v is not None]
                ranges[(name, column)] = max(found) - min(found) if len(found) >= 2 else None
            if members:
                csv_rows.append(
                    [name, method, key, fixed, "range"] + [ranges[(name, column)] for column in METRIC_KEYS]
                )
        rows.append(["Range (max−min)"] + [format_value(ranges[(name, column)]) for name, column in columns])
    lines = ["# Sensitivity to the weights", ""]
    if rows:
        lines += [
            "Range = max − min over the values of the varied weight (the paper's Sensitivity table); "
            "a small range means the method is insensitive to that weight. Cells: value [95% CI] "
            "(or mean ± sd over seeds). Columns: Rouge-L and Reranker, as in the paper"
            + (f", for each of {', '.join(datasets)}" if side_by_side else f" (data: {next(iter(datasets))})")
            + "; sensitivity.csv has every metric.",
            "",
            markdown_table(header, rows),
        ]
        lines += [f"- {note}" for note in table_notes(results, labels)]
    else:
        lines.append(
            "No method was run with two or more values of one weight. For the paper's table pass e.g. "
            "`--methods w_reinforce,eapo --grid w_pos=0.05,0.1,0.2 --grid w0=0.05,0.1,0.2`."
        )
    csv_header = ["data", "method", "varied", "fixed", "value", *METRIC_KEYS]
    return "\n".join(lines) + "\n", csv_text(csv_header, csv_rows)


def weight_ratio(w_pos: float, w_neg: float) -> float:
    """``w+/w−``: ``inf`` for w− = 0 < w+ (PSR), NaN when both are 0."""
    if w_neg == 0:
        return math.inf if w_pos > 0 else math.nan
    return w_pos / w_neg


def _ratio_text(ratio: float) -> str:
    if math.isnan(ratio):
        return "–"
    return "∞" if math.isinf(ratio) else f"{ratio:.4g}"


def fixed_weight_table(entries: Sequence[Entry]) -> tuple[str, str]:
    """The paper's "Performance under different positive/negative reward weight configurations":
    PSR, NSR and GRPO, then the W-REINFORCE runs in blocks — w− varied at a fixed w+ ("P/N ↓", the
    ratio falls down the block) and w+ varied at a fixed w− ("P/N ↑") — with columns w+, w−,
    w+/w−, Rouge-L and Reranker. ``(markdown, csv)``."""
    fixed = [e for e in entries if e.method is not None and set(e.weights) == {"w_pos", "w_neg"}]
    results = _all_results(fixed)
    labels = _labels(results)
    flagged = stand_in_columns(labels)
    columns = list(PAPER_WEIGHT_COLUMNS)
    header = ["Methods", "w+", "w−", "w+/w−"] + [
        column_title(c, None) + ("†" if c in flagged else "") for c in columns
    ]
    blocks: list[tuple[str, list[Entry]]] = []
    named = sorted(
        (e for e in fixed if e.method in FIXED_ROWS),
        key=lambda e: (FIXED_ROWS.index(e.method or ""), sorted(e.weights.items())),
    )
    if named:
        blocks.append(("", named))
    placed: set[int] = set()
    # The paper's order: w− varied (P/N ↓) before w+ varied (P/N ↑).
    weight_blocks = sorted(sensitivity_blocks(fixed), key=lambda block: block[1] != "w_neg")
    for method, key, held, members in weight_blocks:
        if method in FIXED_ROWS:
            continue  # a grid over PSR/NSR/GRPO weights is W-REINFORCE by another name; listed above
        direction = "P/N ↓" if key == "w_neg" else "P/N ↑"
        name = METHOD_NAMES.get(method, method)
        blocks.append((f"{name}, {direction} ({held}, {_SYMBOLS[key]} varied)", [e for _, e in members]))
        placed.update(id(e) for _, e in members)
    others = [e for e in fixed if e.method not in FIXED_ROWS and id(e) not in placed]
    if others:
        blocks.append(("Other fixed weights", others))
    rows: list[list[str]] = []
    csv_rows: list[list[Any]] = []
    for title, members in blocks:
        if title:
            rows.append([f"*{title}*"] + [""] * (len(header) - 1))
        for entry in members:
            w_pos, w_neg = entry.weights["w_pos"], entry.weights["w_neg"]
            ratio = weight_ratio(w_pos, w_neg)
            name = METHOD_NAMES.get(entry.method or "", entry.method or "")
            seeds = f" ({len(entry.results)} seeds)" if len(entry.results) > 1 else ""
            row = [name + seeds, f"{w_pos:g}", f"{w_neg:g}", _ratio_text(ratio)]
            row += [_cell(*_summary(entry, column)) for column in columns]
            rows.append(row)
            csv_rows.append(
                [title or "methods", entry.method, entry.label, w_pos, w_neg, ratio, len(entry.results)]
                + [";".join(entry.runs)]
                + [_summary(entry, column)[0] for column in METRIC_KEYS]
            )
    lines = ["# Positive/negative weight configurations", ""]
    if rows:
        lines += [
            "Fixed weights w+ (positive samples) and w− (negative samples) and their ratio w+/w− (the "
            "paper's table of positive/negative reward weight configurations). Cells: value [95% CI] "
            "(or mean ± sd over seeds); fixed_weights.csv has every metric.",
            "",
            markdown_table(header, rows),
        ]
        lines += [f"- {note}" for note in table_notes(results, labels)]
    else:
        lines.append(
            "No fixed-weight method (GRPO, PSR, NSR, W-REINFORCE) was run. For the paper's table pass e.g. "
            "`--methods grpo,psr,nsr,w_reinforce --grid w_reinforce.w_pos=1 --grid w_neg=0.05,0.1,0.2,5`, "
            "then `--methods w_reinforce --grid w_pos=0.05,0.1,0.2,5` into the same --output-dir."
        )
    csv_header = ["block", "method", "label", "w_pos", "w_neg", "ratio", "n_seeds", "runs", *METRIC_KEYS]
    return "\n".join(lines) + "\n", csv_text(csv_header, csv_rows)


def _side_by_side_entries(
    output_dir: Path, entries: Sequence[Entry], others: Sequence[str | os.PathLike]
) -> dict[str, list[Entry]]:
    """``{dataset label: entries}``: this sweep's, then each other sweep directory's."""
    datasets: dict[str, list[Entry]] = {_data_label(entries): list(entries)}
    for other in others:
        other = Path(other)
        manifest = _read_json(other / MANIFEST)
        if manifest is None:
            raise SweepError(
                f"--side-by-side {other}: no readable {MANIFEST}; pass a directory written by `eapo sweep`"
            )
        group = collect_entries(other, manifest, include_base=False)
        name = _data_label(group)
        if name in datasets:
            name = f"{name} [{other.name}]"
        datasets[name] = group
    return datasets


def write_reports(
    output_dir: Path,
    manifest: Mapping[str, Any],
    *,
    include_base: bool = True,
    failures: Mapping[str, str] | None = None,
    side_by_side: Sequence[str | os.PathLike] = (),
) -> list[Path]:
    """Write comparison.{md,csv}, sensitivity.{md,csv}, fixed_weights.{md,csv} and dynamics.{png,svg};
    return the paths written. ``side_by_side``: other sweep directories (e.g. the same grid on
    another dataset) whose runs join this one's in the sensitivity table."""
    entries = collect_entries(output_dir, manifest, include_base=include_base)
    written = []
    tables = {
        "comparison": comparison_table(entries, failures=failures),
        "sensitivity": sensitivity_table(
            _side_by_side_entries(output_dir, entries, side_by_side) if side_by_side else entries
        ),
        "fixed_weights": fixed_weight_table(entries),
    }
    for stem, (markdown, table_csv) in tables.items():
        for name, text in ((f"{stem}.md", markdown), (f"{stem}.csv", table_csv)):
            atomic_write_text(output_dir / name, text)
            written.append(output_dir / name)
    # Run directories live at runs/<name> (the manifest's paths may be relative to another cwd).
    candidates = [output_dir / "runs" / name for name in manifest.get("runs", {})]
    run_dirs = [
        d for d in candidates if (d / "metrics.jsonl").exists() and (d / "metrics.jsonl").stat().st_size
    ]
    if run_dirs:
        from eapo.plot import plot_runs

        plot_runs(run_dirs, output_dir / "dynamics.png", title="Training dynamics")
        written += [output_dir / "dynamics.png", output_dir / "dynamics.svg"]
    return written
