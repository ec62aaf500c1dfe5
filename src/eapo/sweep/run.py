"""Running a sweep: each configuration is trained and evaluated through a :class:`Runner` (by default
``eapo train`` / ``eapo eval`` subprocesses), finished work is skipped, every outcome is recorded in the
manifest, and the tables are written at the end."""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import functools
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from eapo.config import (
    ConfigError,
    RunConfig,
    config_changes,
    dump_config,
    load_config,
    parse_overrides,
    read_config_tree,
    resolve_config,
)
from eapo.core import WEIGHTING_SCHEMES, method_scheme
from eapo.evaluation.settings import EvalSettings
from eapo.run_dir import FINAL_DIR, atomic_write_text, training_finished
from eapo.sweep.manifest import MANIFEST, read_json, update_manifest
from eapo.sweep.plan import WEIGHT_KEYS, GridAxis, SweepError, SweepRun, plan_runs
from eapo.sweep.tables import write_reports


class RunFailed(RuntimeError):
    """One training or evaluation subprocess failed; the message holds the tail of its log."""


class Runner(Protocol):
    """How a sweep trains and evaluates a configuration; raises :class:`RunFailed` when one fails."""

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
class SweepReport:
    """What :func:`run_sweep` did: each job's status, why each failed job failed, and the files written."""

    output_dir: Path
    statuses: dict[str, str]
    failures: dict[str, str]
    files: list[Path]


@dataclass(frozen=True)
class _ConfiguredRun:
    """A planned run with everything it is trained with: the overrides on the base config, and the
    resulting configuration (``eapo train`` writes it to ``config.yaml``)."""

    run: SweepRun
    overrides: list[str]
    config: RunConfig


def _configure_runs(
    base_config: Path, runs: Sequence[SweepRun], overrides: Sequence[str]
) -> tuple[RunConfig, dict[str, _ConfiguredRun]]:
    """Build and validate the base model's configuration and every run's, before anything runs.

    Weights that the base config (or an override) sets for another method are dropped for a run
    (``algorithm.KEY=null``): demo.yaml's w0 means nothing to grpo. An override that no method takes
    is an error.
    """
    try:
        base = load_config(base_config, list(overrides))
        base_algorithm = read_config_tree(base_config).get("algorithm") or {}
        override_algorithm = parse_overrides(list(overrides)).get("algorithm") or {}
    except (ConfigError, yaml.YAMLError, OSError) as error:
        raise SweepError(f"base config: {error}") from None
    for key in WEIGHT_KEYS:
        if key in override_algorithm and not any(
            key in WEIGHTING_SCHEMES[method_scheme(m)].accepts for m in {r.method for r in runs}
        ):
            raise SweepError(
                f"override algorithm.{key}={override_algorithm[key]} applies to none of the methods "
                f"{', '.join(sorted({r.method for r in runs}))}"
            )
    set_weights = {
        key for key in WEIGHT_KEYS if base_algorithm.get(key) is not None or key in override_algorithm
    }
    configured: dict[str, _ConfiguredRun] = {}
    for run in runs:
        accepted = WEIGHTING_SCHEMES[method_scheme(run.method)].accepts
        dropped = [f"algorithm.{key}=null" for key in sorted(set_weights - set(accepted))]
        run_overrides = [*overrides, *dropped, *run.overrides]
        try:
            config = load_config(base_config, run_overrides)
        except ConfigError as error:
            raise SweepError(f"run {run.name}: {error}") from None
        configured[run.name] = _ConfiguredRun(run, run_overrides, config)
    return base, configured


def _check_run_dirs(output_dir: Path, configured: Mapping[str, _ConfiguredRun]) -> None:
    """Stop the sweep if a run directory was trained with another configuration (naming the differing
    keys). The run's ``config.yaml`` is read as ``eapo train --resume`` reads it: a setting added to
    eapo since the run was configured takes its default and is not a difference, so finished runs
    survive an upgrade that only adds settings."""
    conflicts = []
    for name, planned in configured.items():
        existing = output_dir / "runs" / name / "config.yaml"
        if not existing.exists():
            continue
        try:
            changes = config_changes(existing, planned.config)
        except ConfigError as error:
            conflicts.append(f"{existing.parent}: unreadable config.yaml ({error})")
            continue
        diff = [f"{key}: {old!r} (existing) vs {new!r} (this sweep)" for key, (old, new) in changes.items()]
        if diff:
            conflicts.append(f"{existing.parent}: " + "; ".join(diff[:5]))
    if conflicts:
        raise SweepError(
            "run directories exist with a different configuration (use another --output-dir, or delete them):\n  "
            + "\n  ".join(conflicts)
        )


def _register_runs(
    manifest_path: Path,
    base_config: Path,
    overrides: Sequence[str],
    eval_options: EvalSettings,
    configured: Mapping[str, _ConfiguredRun],
) -> None:
    """Record this invocation (base config, overrides, eval options) and every planned run in the
    manifest, in plan order (the tables list seeds in this order)."""
    header = {
        "base_config": str(base_config),
        "overrides": list(overrides),
        "eval": eval_options.cli_args(),
        "updated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    runs = {
        name: {
            "method": planned.run.method,
            "weights": dict(planned.run.weights),
            "seed": planned.run.seed,
            "label": planned.run.label,
            "run_dir": f"runs/{name}",
            "overrides": planned.overrides,
            "tag": planned.run.tag,
            "extra": {key: value for key, value in planned.run.extra},
        }
        for name, planned in configured.items()
    }
    update_manifest(manifest_path, header, runs)


class _SweepJobs:
    """The sweep's jobs — the base model's evaluation and each configuration's training and evaluation —
    and their outcomes: ``statuses`` (what each job did), ``failures`` (why one failed) and the manifest.

    Jobs may run on the threads of ``--jobs``: one lock guards ``statuses``, ``failures``, ``echo`` and
    this process's manifest writes (:func:`update_manifest` also locks the file against other processes).
    """

    def __init__(
        self,
        output_dir: Path,
        base_config: Path,
        runner: Runner,
        eval_options: EvalSettings,
        echo: Callable[[str], None],
    ) -> None:
        self.output_dir = output_dir
        self.base_config = base_config
        self.runner = runner
        self.eval_options = eval_options
        self.echo = echo
        self.manifest_path = output_dir / MANIFEST
        self.logs = output_dir / "logs"
        self.eval_args = eval_options.cli_args()
        self.statuses: dict[str, str] = {}
        self.failures: dict[str, str] = {}
        self.lock = threading.Lock()

    def say(self, message: str) -> None:
        with self.lock:
            self.echo(message)

    def record(self, name: str, fields: dict[str, Any]) -> None:
        with self.lock:
            update_manifest(self.manifest_path, {}, {name: fields})

    def finished_evaluation(self, eval_dir: Path) -> bool:
        """Whether ``eval_dir`` holds results made with this sweep's evaluation options."""
        existing = read_json(eval_dir / "results.json")
        return existing is not None and self.eval_options.matches(existing, eval_dir / "results.json")

    def evaluate(self, name: str, model_args: list[str], eval_dir: Path) -> bool:
        """Run ``eapo eval`` unless ``eval_dir`` holds results made with the same options; True if it ran.

        Results from before the strict columns (no ``avg_strict``) whose ``samples.jsonl`` is there are
        recomputed from the stored samples (``eapo eval`` on the same directory generates nothing)."""
        existing = read_json(eval_dir / "results.json")
        if existing is not None and self.eval_options.matches(existing, eval_dir / "results.json"):
            stale = "avg_strict" not in existing.get("metrics", {}) and (eval_dir / "samples.jsonl").exists()
            if not stale:
                return False
        self.runner.evaluate(
            [*model_args, "--output-dir", str(eval_dir), *self.eval_args],
            self.logs / f"{name}.eval.log",
        )
        return True

    def evaluate_base(self, base: RunConfig) -> None:
        """The base model's evaluation: every table starts from it."""
        base_yaml = self.output_dir / "base.yaml"
        atomic_write_text(base_yaml, dump_config(base))
        try:
            ran = self.evaluate("base", ["--config", str(base_yaml)], self.output_dir / "base")
            with self.lock:
                self.statuses["base"] = "evaluated" if ran else "skipped"
            self.say(f"[base] {base.model.name_or_path}: {'evaluated' if ran else 'skipped (finished)'}")
        except RunFailed as error:
            with self.lock:
                self.failures["base"] = f"evaluation failed: {error}"
                self.statuses["base"] = "failed"
            self.say(f"[base] FAILED (evaluation); see {self.logs / 'base.eval.log'}")

    def train_and_evaluate(self, prefix: str, name: str, planned: _ConfiguredRun) -> None:
        """One configuration: train (or resume, or skip if ``final/`` exists), then evaluate (or skip).

        A run whose weights are gone (a new machine with only the committed small outputs) but whose
        ``config.yaml`` is this plan's, whose ``metrics.jsonl`` reached ``train.max_steps``
        (:func:`eapo.run_dir.training_finished`) and whose ``eval/results.json`` was made with this
        sweep's evaluation options is finished: it is skipped, and the tables are built from those files.
        """
        run_dir = self.output_dir / "runs" / name
        actions = []
        if (
            not (run_dir / FINAL_DIR).exists()
            and training_finished(run_dir)
            and self.finished_evaluation(run_dir / "eval")
        ):
            with self.lock:
                self.statuses[name] = "skipped (finished; committed outputs, no weights)"
            self.say(f"{prefix}: {self.statuses[name]}")
            self.record(name, {"status": "done", "error": None})
            return
        try:
            if not (run_dir / "final").exists():
                resume = (run_dir / "config.yaml").exists() or (run_dir / "metrics.jsonl").exists()
                self.say(f"{prefix}: {'resuming' if resume else 'training'} {planned.run.label}")
                train_log = self.logs / f"{name}.train.log"
                self.runner.train(self.base_config, planned.overrides, run_dir, resume=resume, log=train_log)
                actions.append("resumed" if resume else "trained")
            if self.evaluate(name, ["--model", str(run_dir)], run_dir / "eval"):
                actions.append("evaluated")
            with self.lock:
                self.statuses[name] = ", ".join(actions) or "skipped (finished)"
            self.say(f"{prefix}: {self.statuses[name]}")
            self.record(name, {"status": "done", "error": None})
        except RunFailed as error:
            stage = "training" if not (run_dir / "final").exists() else "evaluation"
            with self.lock:
                self.failures[name] = f"{stage} failed: {error}"
                self.statuses[name] = "failed"
            self.record(name, {"status": "failed", "error": self.failures[name]})
            log = self.logs / (name + (".train.log" if stage == "training" else ".eval.log"))
            self.say(f"{prefix}: FAILED ({stage}); see {log}")


def _run_tasks(tasks: Sequence[Callable[[], None]], jobs: int) -> None:
    """Run ``tasks`` one after another, or ``jobs`` at a time on threads. A job records its own
    :class:`RunFailed`; anything else (a bug, Ctrl-C) propagates."""
    if jobs == 1:
        for task in tasks:
            task()
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="eapo-sweep") as pool:
            for future in [pool.submit(task) for task in tasks]:
                future.result()


def _reported_failures(manifest: Mapping[str, Any], failures: Mapping[str, str]) -> dict[str, str]:
    """Every failed run recorded in the manifest (by any process), and this invocation's base model failure."""
    reported = {
        name: record["error"] for name, record in manifest["runs"].items() if record.get("status") == "failed"
    }
    if "base" in failures:
        reported["base"] = failures["base"]
    return reported


def run_sweep(
    base_config: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    methods: Sequence[str],
    grids: Sequence[GridAxis | str] = (),
    seeds: Sequence[int] | None = None,
    overrides: Sequence[str] = (),
    eval_options: EvalSettings | None = None,
    include_base: bool = True,
    runner: Runner | None = None,
    echo: Callable[[str], None] = print,
    side_by_side: Sequence[str | os.PathLike] = (),
    jobs: int = 1,
    planned: Sequence[SweepRun] | None = None,
    report_only: bool = False,
) -> SweepReport:
    """Train and evaluate every planned configuration, then write the tables and the figure.

    Args:
        base_config: the training config every run starts from (a file or a packaged preset's name).
        output_dir: the sweep directory (see :mod:`eapo.sweep`).
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
        planned: the runs themselves (e.g. a study's labelled ``runs:``), instead of ``methods`` ×
            ``grids`` × ``seeds``.
        report_only: train and evaluate nothing and leave the manifest as it is: write the tables and
            the figure from what the directory holds now (a sweep still running in another process, or
            one stopped part way). Runs not finished yet are left out of the tables, as they are while
            a sweep runs; the directory must hold a manifest.
    """
    try:
        base_config = resolve_config(base_config)
    except ConfigError as error:
        raise SweepError(f"base config: {error}") from None
    output_dir = Path(output_dir)
    eval_options = eval_options or EvalSettings()
    runner = runner or SubprocessRunner()
    runs = list(planned) if planned is not None else plan_runs(methods, grids, seeds)
    names = [run.name for run in runs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SweepError(
            f"two planned runs share the directory name(s) {duplicates}; give them distinct labels"
        )
    for other in side_by_side:
        if not (Path(other) / MANIFEST).is_file():
            raise SweepError(
                f"--side-by-side {other}: no {MANIFEST} there; pass a directory written by `eapo sweep`"
            )
    if jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {jobs}")

    # 1. Every configuration is built and validated before anything runs.
    base, configured = _configure_runs(base_config, runs, overrides)
    _check_run_dirs(output_dir, configured)

    # 2. Every planned run is registered up front.
    if report_only and not (output_dir / MANIFEST).is_file():
        raise SweepError(
            f"--report-only: {output_dir} holds no {MANIFEST}, so there is nothing to report; run the "
            "sweep without --report-only first"
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    sweep = _SweepJobs(output_dir, base_config, runner, eval_options, echo)
    if not report_only:
        _register_runs(sweep.manifest_path, base_config, overrides, eval_options, configured)

        # 3. The base model's evaluation, then each configuration: train (or resume, or skip), then
        # evaluate (or skip).
        tasks: list[Callable[[], None]] = (
            [functools.partial(sweep.evaluate_base, base)] if include_base else []
        )
        for index, (name, planned) in enumerate(configured.items(), start=1):
            prefix = f"[{index}/{len(configured)}] {name}"
            tasks.append(functools.partial(sweep.train_and_evaluate, prefix, name, planned))
        _run_tasks(tasks, jobs)

    # 4. Tables and figure over every run recorded in this directory (by any process).
    manifest = update_manifest(sweep.manifest_path, {}, {})
    files = write_reports(
        output_dir,
        manifest,
        include_base=include_base,
        failures=_reported_failures(manifest, sweep.failures),
        side_by_side=side_by_side,
    )
    for path in files:
        echo(f"wrote {path}")
    return SweepReport(output_dir=output_dir, statuses=sweep.statuses, failures=sweep.failures, files=files)
