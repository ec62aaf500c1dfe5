"""``eapo study``'s runs: plan them, train and evaluate them through the sweep runner, write the verdicts.

The study trains the configurations its config names from the same base model and seed(s), evaluates
each on a held-out split with k samples per prompt, and writes — besides the sweep's ``comparison.md``
table and ``dynamics.png`` figure (it *is* an ``eapo sweep``: same runner, tables and skip-if-finished)
— ``claims.md`` and ``claims.json``: for each claim of its claims file (``study.claims``, e.g. ``paper``:
``configs/paper.claims.yaml``), whether it *held*, *did not hold*, or is *within noise* in this run, with
the numbers and the rules that decided them (the engine: :mod:`eapo.study.claims`; the intervals:
:mod:`eapo.study.stats`). Nothing here names a study's methods, claims or thresholds: they are the study
config's (``study.methods`` / ``study.grids`` or ``study.runs``) and its claims file's.

``study.methods`` (with ``study.grids``, as ``eapo sweep --methods/--grid``) plans every method × seed;
``study.runs`` lists labelled runs instead (:func:`study_runs`), e.g.::

    study:
      seeds: [0, 1, 2]
      runs:
        - {label: W-REINFORCE w+=0.1, method: w_reinforce, overrides: {w_pos: 0.1}}
        - {label: W-REINFORCE w+=0.05, method: w_reinforce, overrides: {w_pos: 0.05}, seeds: [0, 1]}
        - {label: Clip-higher, method: clip_higher, overrides: {algorithm.epsilon_high: 0.28}, seeds: [0, 1]}

The claims find runs by method and effective weights (:func:`eapo.study.roles.run_role`), so the paper's
claims read the runs at the methods' registered weights whatever they are labelled. With such runs ``sensitivity.md``
shows every metric and both Avgs, and ``dynamics.png`` draws each configuration's mean over seeds with a
band across them (:func:`write_study_tables`). A run whose weights are gone but whose committed small
outputs are complete counts as finished (:func:`eapo.run_dir.training_finished`, :mod:`eapo.sweep.run`).
``eapo study --claims-only`` (:func:`rejudge_study`) judges a finished study's claims again from its runs
and rewrites ``claims.md`` / ``claims.json`` alone.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from eapo.evaluation.settings import EvalSettings, default_scorers
from eapo.run_dir import SUMMARY_FILE, atomic_write_text, cap_share, read_metrics, training_finished
from eapo.study.claims import Assessment, Claim, ClaimsFile, assess
from eapo.study.claims_file import STUDY_DEFAULTS, ClaimsError, load_claims, resolve_claims, study_params
from eapo.study.render import claims_markdown, claims_payload
from eapo.study.roles import CLIPPED_KEY, H0_KEY, SERIES_KEYS, MethodData, run_role
from eapo.sweep.manifest import MANIFEST, read_json
from eapo.sweep.plan import WEIGHT_KEYS, SweepError, SweepRun, plan_runs
from eapo.sweep.run import SweepReport, run_sweep

__all__ = [
    "sensitivity_columns",
    "StudySettings",
    "StudyReport",
    "read_study_config",
    "plan_study",
    "study_runs",
    "claims_params",
    "collect_method_data",
    "write_study_tables",
    "run_study",
    "rejudge_study",
]


# --------------------------------------------------------------------------------------------
# Settings and plan
# --------------------------------------------------------------------------------------------


@dataclass
class StudySettings:
    """The ``study:`` section of a study config (every field can also be given on the command line)."""

    seeds: list[int] = field(default_factory=lambda: [0])  # training seeds; results are pooled per method
    jobs: int = 5  # configurations trained/evaluated at once (they share one GPU)
    k: int = 8  # samples per prompt in evaluation (RL@k, RR@k)
    eval_split: str = "dev"  # the held-out split
    eval_limit: int | None = 100  # prompts evaluated (None: the whole split)
    eval_temperature: float | None = None  # sampling temperature in evaluation (None: the run's)
    eval_max_new_tokens: int | None = None  # response cap in evaluation (None: the run's)
    eval_batch_size: int | None = None  # prompts per generation call (None: eapo eval's default)
    backend: str = "auto"  # eval generation backend
    # how the scorers score (eapo.rewards.ScorerSetting: rouge_level, reranker_backend; {}: the run's)
    scorer_settings: dict[str, str] = field(default_factory=dict)
    # the study's numbers its claims file may name (eapo.study.claims_file.STUDY_PARAMS)
    window: float = 0.1  # fraction of steps in the start / end windows (a generic default)
    # a band its rules read, e.g. the tolerance around H_0 of "near H_0" (None: the claims file's params)
    entropy_band: float | None = None
    # a share cut at the cap its rules read (None: the claims file's params)
    max_clipped_share: float | None = None
    # what runs: the methods x seeds, each method's weights set by grids (as eapo sweep --methods/--grid) ...
    methods: list[str] | None = None
    grids: list[str] = field(default_factory=list)
    # ... or labelled runs, each {label, method, overrides, seeds} (one of methods or runs)
    runs: list[dict[str, Any]] | None = None
    # the claims file claims.md judges (required): a .yaml path relative to the study config (e.g.
    # study_cpu_controls.claims.yaml), or a packaged one by name ("paper": configs/paper.claims.yaml)
    claims: str | None = None

    def validate(self, where: str = "study") -> StudySettings:
        if not self.seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in self.seeds):
            raise SweepError(f"{where}.seeds must be a non-empty list of integers, got {self.seeds!r}")
        if self.jobs < 1 or self.k < 1:
            raise SweepError(f"{where}.jobs and {where}.k must be >= 1 (got {self.jobs}, {self.k})")
        if self.eval_limit is not None and self.eval_limit < 1:
            raise SweepError(f"{where}.eval_limit must be >= 1 or null, got {self.eval_limit}")
        if self.eval_temperature is not None and self.eval_temperature < 0:
            raise SweepError(f"{where}.eval_temperature must be >= 0 or null, got {self.eval_temperature}")
        if not isinstance(self.scorer_settings, dict):
            raise SweepError(f"{where}.scorer_settings must be a mapping, got {self.scorer_settings!r}")
        try:
            EvalSettings(scorer_settings=self.scorer_settings)
        except ValueError as error:
            raise SweepError(f"{where}.scorer_settings: {error}") from None
        if not 0 < self.window <= 0.5:
            raise SweepError(f"{where}.window must be in (0, 0.5], got {self.window}")
        if self.entropy_band is not None and not 0 < self.entropy_band < 1:
            raise SweepError(f"{where}.entropy_band must be in (0, 1), got {self.entropy_band}")
        if self.max_clipped_share is not None and not 0 < self.max_clipped_share < 1:
            raise SweepError(f"{where}.max_clipped_share must be in (0, 1), got {self.max_clipped_share}")
        if (self.methods is None) == (self.runs is None):
            raise SweepError(
                f"{where}: name what runs, either methods (with grids), e.g. methods: [grpo, psr] and grids: "
                "[w_reinforce.w_pos=0.1], or runs (labelled runs); "
                + ("it names both" if self.methods is not None else "it names neither")
            )
        if self.methods is not None:
            if not isinstance(self.methods, list) or not all(isinstance(m, str) for m in self.methods):
                raise SweepError(f"{where}.methods must be a list of method names, got {self.methods!r}")
            if not isinstance(self.grids, list) or not all(isinstance(g, str) for g in self.grids):
                raise SweepError(f"{where}.grids must be a list like [eapo.w0=0.2], got {self.grids!r}")
            plan_runs(self.methods, self.grids, self.seeds)  # raises on an unknown method or a bad grid
        elif self.grids:
            raise SweepError(
                f"{where}.grids sets the weights of study.methods; a run of study.runs sets its own"
            )
        if self.runs is not None:
            study_runs(self.runs, self.seeds, where=f"{where}.runs")  # raises on a bad entry
        if not isinstance(self.claims, str) or not self.claims.strip():
            raise SweepError(
                f"{where}.claims must name a claims file (a .yaml path or a packaged name such as paper), "
                f"got {self.claims!r}"
            )
        return self

    def eval_settings(self) -> EvalSettings:
        """What every evaluation of the study samples and scores: ``k``, ``eval_*``, ``backend`` and
        ``scorer_settings`` (``eapo sweep``'s ``--k``, ``--eval-*``, ``--backend``, ``--rouge-level``, ...
        mean the same), by the default scorers."""
        return EvalSettings(
            k=self.k,
            limit=self.eval_limit,
            split=self.eval_split,
            temperature=self.eval_temperature,
            max_new_tokens=self.eval_max_new_tokens,
            batch_size=self.eval_batch_size,
            backend=self.backend,
            scorers=",".join(default_scorers()),
            scorer_settings=self.scorer_settings,
        )


def read_study_config(path: str | os.PathLike) -> tuple[StudySettings, dict[str, Any]]:
    """Split a study config (a file or a packaged preset's name: ``study``, ``study_cpu``, ...) into its
    ``study:`` settings and the training config every run starts from."""
    from eapo.config import ConfigError, read_config_tree, resolve_config

    try:
        path = resolve_config(path)
        tree = read_config_tree(path)
    except ConfigError as error:
        raise SweepError(str(error)) from None
    section = tree.pop("study", None) or {}
    if not isinstance(section, dict):
        raise SweepError(
            f"{path}: 'study' must be a mapping of {', '.join(f.name for f in fields(StudySettings))}"
        )
    known = {f.name for f in fields(StudySettings)}
    unknown = sorted(set(section) - known)
    if unknown:
        raise SweepError(f"{path}: unknown key study.{unknown[0]}; valid keys: {', '.join(sorted(known))}")
    if isinstance(section.get("seeds"), int):
        section["seeds"] = [section["seeds"]]
    settings = StudySettings(**section).validate(f"{path}: study")
    claims_params(settings, study_claims(settings, path))  # a claims file that cannot be used: an error now
    return settings, tree


def study_claims(settings: StudySettings, config: str | os.PathLike) -> ClaimsFile:
    """The claims file of ``settings.claims`` (resolved beside ``config``), checked."""
    try:
        return load_claims(resolve_claims(str(settings.claims), config))
    except ClaimsError as error:
        raise SweepError(str(error)) from None


def claims_params(settings: StudySettings, claims: ClaimsFile) -> dict[str, Any]:
    """The study's numbers its claims file reads (:func:`eapo.study.claims_file.study_params`), each
    :data:`~eapo.study.claims_file.STUDY_DEFAULTS` one from the study config, else from the claims file's
    ``params``; one that the claims file names and neither sets is an error."""
    values = study_params(settings.window, settings.entropy_band, settings.max_clipped_share)
    for name in STUDY_DEFAULTS:
        if name not in values and name in claims.params:
            values[name] = claims.params[name]
        if name not in values and name in claims.study_params:
            raise SweepError(
                f"{claims.path} names {name}, which neither the study config (study.{name}) nor the claims "
                "file's params sets"
            )
    return values


def plan_study(
    seeds: Sequence[int],
    runs: Sequence[Mapping[str, Any]] | None = None,
    *,
    methods: Sequence[str] | None = None,
    grids: Sequence[str] = (),
) -> list[SweepRun]:
    """The study's runs: ``methods`` × ``seeds`` (their weights set by ``grids``, as ``eapo sweep``), every
    method from the same base and seed; or, with ``runs`` (the ``study.runs`` entries), those labelled
    runs (:func:`study_runs`)."""
    if runs is not None:
        return study_runs(runs, seeds)
    if not methods:
        raise SweepError("a study names what runs: study.methods (with study.grids) or study.runs")
    return plan_runs(methods, grids, list(seeds))


_RUN_FIELDS = ("label", "method", "overrides", "seeds")


def study_runs(
    entries: Sequence[Mapping[str, Any]], seeds: Sequence[int], *, where: str = "study.runs"
) -> list[SweepRun]:
    """The labelled runs of a study config's ``runs:`` list, each × its seeds (default: ``study.seeds``).

    Each entry: ``label`` (names the run directory ``<label>-seed<N>`` and its table row; distinct),
    ``method`` (an ``algorithm.method``), ``overrides`` (optional mapping: a weight — ``w_pos``,
    ``w_neg``, ``w0``, ``w_min``, ``w_max``, ``anchor_steps``, bare or as ``algorithm.KEY`` — or any
    dotted config key, e.g. ``algorithm.epsilon_high: 0.28``) and ``seeds`` (optional list of ints).
    Two entries of the same method with different weights are two configurations (the sensitivity
    points); the claims find runs by method and effective weights (:func:`eapo.study.claims.run_role`), not
    by label.
    """
    from eapo.core import methods

    if not isinstance(entries, Sequence) or isinstance(entries, str) or not entries:
        raise SweepError(f"{where} must be a non-empty list of {{label, method, overrides, seeds}} mappings")
    planned: list[SweepRun] = []
    labels: set[str] = set()
    for index, entry in enumerate(entries):
        here = f"{where}[{index}]"
        if not isinstance(entry, Mapping):
            raise SweepError(f"{here} must be a mapping with keys {', '.join(_RUN_FIELDS)}, got {entry!r}")
        unknown = sorted(set(entry) - set(_RUN_FIELDS))
        if unknown:
            raise SweepError(f"{here}: unknown key {unknown[0]!r}; valid keys: {', '.join(_RUN_FIELDS)}")
        label, method = entry.get("label"), entry.get("method")
        if not isinstance(label, str) or not label.strip():
            raise SweepError(f"{here}.label must be a non-empty string (it names the run directory)")
        if label in labels:
            raise SweepError(f"{here}.label {label!r} is used twice; every run needs its own label")
        labels.add(label)
        if method not in methods():
            raise SweepError(f"{here}.method {method!r} is not a method; valid: {', '.join(methods())}")
        overrides = entry.get("overrides") or {}
        if not isinstance(overrides, Mapping):
            raise SweepError(f"{here}.overrides must be a mapping like {{w_pos: 0.05}}, got {overrides!r}")
        weights: dict[str, float] = {}
        extra: list[tuple[str, Any]] = []
        for key, value in overrides.items():
            bare = key.removeprefix("algorithm.")
            if bare in WEIGHT_KEYS:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise SweepError(f"{here}.overrides.{key} must be a number, got {value!r}")
                weights[bare] = float(value)
            elif "." in key:
                extra.append((key, value))
            else:
                raise SweepError(
                    f"{here}.overrides.{key}: not a weight ({', '.join(WEIGHT_KEYS)}); write other settings "
                    f"as dotted config keys, e.g. algorithm.{key}"
                )
        run_seeds = entry.get("seeds", list(seeds))
        if isinstance(run_seeds, int) and not isinstance(run_seeds, bool):
            run_seeds = [run_seeds]
        if not run_seeds or not all(isinstance(v, int) and not isinstance(v, bool) for v in run_seeds):
            raise SweepError(f"{here}.seeds must be a non-empty list of integers, got {run_seeds!r}")
        for seed in dict.fromkeys(run_seeds):
            planned.append(SweepRun(method, tuple(sorted(weights.items())), seed, label, tuple(extra)))
    return planned


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


@dataclass
class StudyReport:
    output_dir: Path
    sweep: SweepReport | None  # None: --claims-only (nothing was run)
    claims: dict[str, list[Claim]]  # each group of the claims file (claims.json's key) -> its claims
    files: list[Path]
    wall_time_s: float
    assessment: Assessment | None = None


def collect_method_data(
    output_dir: Path,
    runs: Sequence[SweepRun],
    *,
    skip: Collection[str] = (),
    keys: Sequence[str] = SERIES_KEYS,
) -> dict[str, MethodData]:
    """Read each planned run's metrics.jsonl and eval/results.json, grouped by configuration
    (:func:`eapo.study.roles.run_role`: ``"eapo"``, ``"w_reinforce:w_pos=0.2"``, ...; seeds pooled), with
    the series of the metrics ``keys``.

    An evaluation counts once its run's training finished (:func:`eapo.run_dir.training_finished`:
    ``final/`` exists, or — the weights gone — ``metrics.jsonl`` reached ``train.max_steps``).
    ``skip`` leaves out configurations by role: an interim report skips those still training
    (:func:`incomplete_configurations`), so no claim is decided on part of its seeds."""
    data: dict[str, MethodData] = {}
    for run in runs:
        if run_role(run.method, dict(run.weights)) in skip:
            continue
        run_dir = output_dir / "runs" / run.name
        rows = read_metrics(run_dir) if (run_dir / "metrics.jsonl").exists() else []
        results = read_json(run_dir / "eval" / "results.json")
        if not rows and results is None:
            continue
        d = data.setdefault(run_role(run.method, dict(run.weights)), MethodData())
        d.runs.append(run.name)
        if rows:
            path = run_dir / "metrics.jsonl"
            for key in dict.fromkeys(keys):
                # the cap's share: eapo's stopped_by_cap (TRL's clipped_ratio also counts a rollout ended
                # by a stop string; eapo.run_dir.cap_share)
                values = [cap_share(row, path) if key == CLIPPED_KEY else row.get(key) for row in rows]
                d.series.setdefault(key, []).append(values)
            d.h0.append(next((row[H0_KEY] for row in rows if row.get(H0_KEY) is not None), None))
            d.seeds.append(run.seed)
        if results is not None and training_finished(run_dir):
            d.results.append(results)
    return data


def incomplete_configurations(output_dir: Path, runs: Sequence[SweepRun]) -> dict[str, tuple[str, int, int]]:
    """Configurations (by role) with a planned run not yet trained to its end and evaluated:
    ``{role: (label, finished, planned)}``."""
    counts: dict[str, list[Any]] = {}
    for run in runs:
        run_dir = output_dir / "runs" / run.name
        done = training_finished(run_dir) and (run_dir / "eval" / "results.json").is_file()
        entry = counts.setdefault(run_role(run.method, dict(run.weights)), [run.label, 0, 0])
        entry[1] += int(done)
        entry[2] += 1
    return {role: (label, done, planned) for role, (label, done, planned) in counts.items() if done < planned}


def sensitivity_columns() -> tuple[str, ...]:
    """The metric columns of the study's sensitivity.md: the paper's layout (every column of the main
    table), its Avg and the strict Avg."""
    from eapo.evaluation.metrics import MAIN_AVG, STRICT_AVG, avg_columns

    return (*avg_columns()[MAIN_AVG], MAIN_AVG, STRICT_AVG)


def plot_bands(claims: ClaimsFile, params: Mapping[str, Any]) -> dict[str, tuple[float, ...]]:
    """The lines its claims file's ``plot.bands`` draws on a study's ``dynamics.png``, per panel key, with
    the study's numbers ``params`` (:func:`claims_params`) filled in: ``1 ± entropy_band`` -> (0.9, 1.1)."""
    from eapo.study.quantities import Reading

    reading = Reading({}, {}, {**claims.params, **params})
    return {
        panel: tuple(float(reading.number(value)) for value in values)
        for panel, values in (claims.plot.get("bands") or {}).items()
    }


def write_study_tables(
    output_dir: Path, runs: Sequence[SweepRun], *, bands: Mapping[str, Sequence[float]] | None = None
) -> list[Path]:
    """The study's versions of the sweep's sensitivity table and figure (they replace the sweep's):
    ``sensitivity.md`` / ``.csv`` with every metric and both Avgs (:func:`sensitivity_columns`), and
    ``dynamics.png`` / ``.svg`` with one line per configuration (the mean over its seeds) and a band
    from its lowest to its highest seed; ``bands``: dotted lines per panel (:func:`plot_bands`)."""
    from eapo.plot import plot_seed_bands
    from eapo.sweep.manifest import update_manifest
    from eapo.sweep.tables import collect_entries, sensitivity_table

    manifest = update_manifest(output_dir / MANIFEST, {}, {})
    written: list[Path] = []
    markdown, table_csv = sensitivity_table(
        collect_entries(output_dir, manifest, include_base=False), columns=sensitivity_columns()
    )
    for name, text in (("sensitivity.md", markdown), ("sensitivity.csv", table_csv)):
        atomic_write_text(output_dir / name, text)
        written.append(output_dir / name)
    groups: dict[str, list[Path]] = {}
    for run in runs:
        run_dir = output_dir / "runs" / run.name
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists() and metrics.stat().st_size:
            groups.setdefault(run.label, []).append(run_dir)
    if groups:
        plot_seed_bands(groups, output_dir / "dynamics.png", title="Training dynamics", bands=bands)
        written += [output_dir / "dynamics.png", output_dir / "dynamics.svg"]
    return written


def _rollout_backends(output_dir: Path, runs: Sequence[SweepRun]) -> list[str]:
    backends = []
    for run in runs:
        summary = read_json(output_dir / "runs" / run.name / SUMMARY_FILE) or {}
        if summary.get("rollout/backend"):
            backends.append(str(summary["rollout/backend"]))
    return backends


def run_study(
    config: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    settings: StudySettings | None = None,
    overrides: Sequence[str] = (),
    runner: Any = None,
    echo: Callable[[str], None] = print,
    report_only: bool = False,
) -> StudyReport:
    """Run (or finish) the study and write the sweep's tables and figure plus ``claims.md`` / ``claims.json``.

    Args:
        config: a study config: a training config with an optional ``study:`` section.
        settings: replaces the config's ``study:`` section (the CLI merges its flags into it).
        overrides: ``key=value`` applied to every run's training config.
        runner: how train/eval are executed (default: subprocesses, as ``eapo sweep``).
        report_only: an interim report: train and evaluate nothing (the study may be running in
            another process) and write the tables, figure and claims from the runs finished so far.
            A configuration counts only once all its runs have finished; the claims over the others
            are not measured, and ``claims.md`` lists them.
    """
    started = time.time()
    output_dir = Path(output_dir)
    from_file, tree = read_study_config(config)
    settings = (settings or from_file).validate()
    claims = study_claims(settings, config)
    runs = plan_study(settings.seeds, settings.runs, methods=settings.methods, grids=settings.grids)
    params = claims_params(settings, claims)

    # The training config every run starts from: the study config without its study section, checked
    # (with the overrides) before anything is written.
    from eapo.config import ConfigError, config_from_tree

    try:
        config_from_tree(copy.deepcopy(tree), list(overrides), source=config)
    except ConfigError as error:
        raise SweepError(str(error)) from None
    output_dir.mkdir(parents=True, exist_ok=True)
    base = output_dir / "study-base.yaml"
    text = f"# The training part of {config} (written by eapo study)\n" + yaml.safe_dump(
        tree, sort_keys=False, allow_unicode=True
    )
    if not base.exists() or base.read_text(encoding="utf-8") != text:
        atomic_write_text(base, text)

    sweep = run_sweep(
        base,
        output_dir,
        methods=list(dict.fromkeys(run.method for run in runs)),
        planned=runs,
        overrides=list(overrides),
        eval_options=settings.eval_settings(),
        include_base=True,
        runner=runner,
        echo=echo,
        jobs=settings.jobs,
        report_only=report_only,
    )

    incomplete = incomplete_configurations(output_dir, runs) if report_only else {}
    data = collect_method_data(output_dir, runs, skip=incomplete, keys=[*SERIES_KEYS, *claims.metrics])
    study_files = write_study_tables(output_dir, runs, bands=plot_bands(claims, params))
    wall = time.time() - started
    backends = _rollout_backends(output_dir, runs)
    context = [
        f"Study config: `{config}`; seeds: {', '.join(map(str, settings.seeds))}; evaluation: split "
        f"`{settings.eval_split}`, {settings.eval_limit or 'all'} prompts, k = {settings.k}. "
        f"Runs: {output_dir / 'runs'}; tables: comparison.md; figure: dynamics.png.",
        f"Rollout backend(s): {', '.join(sorted(set(backends))) or 'unknown'}. "
        f"This invocation of eapo study took {wall:.0f} s (finished runs are skipped, not retimed).",
    ]
    if sweep.failures:
        context.append(f"Failed runs (their claims are not measured): {', '.join(sorted(sweep.failures))}.")
    if report_only:
        waiting = "; ".join(
            f"{label} ({done} of {planned} runs)" for label, done, planned in incomplete.values()
        )
        context.insert(
            0,
            "**Interim report** (`eapo study --report-only`): nothing was trained or evaluated by it. "
            + (
                f"Not yet complete, so left out and their claims not measured: {waiting}."
                if incomplete
                else "Every planned run has finished."
            ),
        )
    payload: dict[str, Any] = {
        "config": str(config),
        "settings": asdict(settings),
        "wall_time_s": wall,
        "backends": backends,
        "report_only": report_only,
        "incomplete": {
            role: {"label": label, "finished": done, "planned": planned}
            for role, (label, done, planned) in incomplete.items()
        },
    }
    assessment = _write_claims(output_dir, claims, data, params, context, payload)
    files = [*sweep.files, *study_files, output_dir / "claims.md", output_dir / "claims.json"]
    echo(f"wrote {output_dir / 'claims.md'}")
    return StudyReport(output_dir, sweep, assessment.claims, files, wall, assessment)


#: The keys of claims.json that record the invocation that wrote it (the rest is the claims' own).
RECORD_KEYS = ("config", "settings", "wall_time_s", "backends", "report_only", "incomplete")


def _write_claims(
    output_dir: Path,
    claims: ClaimsFile,
    data: Mapping[str, MethodData],
    params: Mapping[str, Any],
    context: Sequence[str],
    record: Mapping[str, Any],
) -> Assessment:
    """Judge ``claims`` over ``data`` with the study's numbers ``params`` (:func:`claims_params`) and write
    claims.md (``context`` under its title) and claims.json (``record``, then the claims file's layout, the
    configurations read and the manifest's name)."""
    assessment = assess(claims, data, params)
    atomic_write_text(output_dir / "claims.md", claims_markdown(claims, assessment, context))
    payload = {
        **record,
        **claims_payload(claims, assessment),
        "configurations": {role: list(d.runs) for role, d in data.items()},
        "manifest": MANIFEST,
    }
    atomic_write_text(output_dir / "claims.json", json.dumps(payload, indent=2, default=str) + "\n")
    return assessment


def _context_of(markdown: str) -> list[str]:
    """The context lines of a claims.md: those between its title and the first blank line after it."""
    lines = markdown.split("\n")
    if len(lines) < 3 or not lines[0].startswith("# ") or lines[1]:
        return []
    context = []
    for line in lines[2:]:
        if not line:
            break
        context.append(line)
    return context


def rejudge_study(
    config: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    settings: StudySettings | None = None,
    echo: Callable[[str], None] = print,
) -> StudyReport:
    """``eapo study --claims-only``: judge a study's claims again, from its finished runs, by its claims file
    as it is now, and rewrite ``claims.md`` / ``claims.json`` (nothing else: no run, table or figure).

    What the invocation that ran the study recorded — ``claims.json``'s :data:`RECORD_KEYS` (its config,
    settings, wall time, backends, interim state) and the context lines under ``claims.md``'s title — is
    kept as written; the claims, their tables and the configurations read are computed again. As
    ``--report-only``, a configuration counts once all its planned runs have finished; if that set differs
    from the one ``claims.json`` recorded, the runs changed since, and this refuses (write a new report with
    ``eapo study --report-only``).
    """
    started = time.time()
    output_dir = Path(output_dir)
    from_file, _ = read_study_config(config)
    settings = (settings or from_file).validate()
    claims = study_claims(settings, config)
    written_json, written_md = output_dir / "claims.json", output_dir / "claims.md"
    if not written_json.is_file() or not written_md.is_file():
        raise SweepError(
            f"--claims-only: {output_dir} holds no claims.json and claims.md to rewrite; run eapo study (or "
            "eapo study --report-only) first"
        )
    try:
        previous = json.loads(written_json.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise SweepError(f"{written_json}: not valid JSON ({error})") from None
    if not isinstance(previous, dict):
        raise SweepError(f"{written_json}: expected a JSON object")
    runs = plan_study(settings.seeds, settings.runs, methods=settings.methods, grids=settings.grids)
    incomplete = incomplete_configurations(output_dir, runs)
    recorded = previous.get("incomplete") or {}
    if set(incomplete) != set(recorded):
        now = ", ".join(sorted(incomplete)) or "none"
        then = ", ".join(sorted(recorded)) or "none"
        raise SweepError(
            f"--claims-only: the runs of {output_dir} changed since {written_json} was written (configurations "
            f"not complete then: {then}; now: {now}); write a new report with eapo study --report-only"
        )
    data = collect_method_data(output_dir, runs, skip=incomplete, keys=[*SERIES_KEYS, *claims.metrics])
    context = _context_of(written_md.read_text(encoding="utf-8"))
    record = {key: previous[key] for key in RECORD_KEYS if key in previous}
    assessment = _write_claims(output_dir, claims, data, claims_params(settings, claims), context, record)
    echo(f"wrote {written_md} and {written_json} (claims judged again; the run record kept)")
    return StudyReport(
        output_dir, None, assessment.claims, [written_md, written_json], time.time() - started, assessment
    )
