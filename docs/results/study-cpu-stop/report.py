"""The stop study's report: plan.md's claims 2, 8 (the ranking and the answers' shape) and 9, beside 1-7.

    .venv/bin/python docs/results/study-cpu-stop/report.py [STUDY_DIR] [--controls CLAIMS_JSON] [--out DIR]

Reads only the study's outputs (``STUDY_DIR``, default this folder): ``sweep.json`` (the planned runs; without
it, the plan of ``configs/study_cpu_stop.yaml``), each run's ``metrics.jsonl``, ``eval/results.json`` and
``eval/samples.jsonl``, the ``claims.json`` that ``eapo study`` writes into ``STUDY_DIR`` (when present) and
the controls study's ``claims.json``; writes ``report.json`` (every claim row: its quantity, intervals,
verdict and the plan's rule, quoted) and ``report.md`` into ``STUDY_DIR`` (or ``--out``). Nothing is trained or evaluated.

What decides what (``plan.md``, "The claims and their rules"; where this file and the page disagree, the page
is the rule):

* A configuration counts once **all** its planned runs have trained to their last step and been evaluated
  (as ``eapo study --report-only``); until then its rows are *not measured* ("A claim whose runs are
  missing, failed or did not log the metric is not measured"), never an error.
* Claims 1-7 and 8's two "EAPO scores best" rows (over all eight configurations, NSR included): the study's
  claims file, ``configs/study_cpu_stop.claims.yaml`` (the one ``eapo study`` judges: its ``study.claims``),
  judged by ``eapo.study.claims.assess`` on the finished configurations. Its rules are plan.md's, quoted
  (``RULES``). When ``eapo study`` has written ``STUDY_DIR/claims.json``, each of its verdicts is set beside
  this report's and any difference is listed (e.g. a stale interim ``claims.json``).
* Claim 8: every configuration's Avg and strict-Avg interval ranked by mean (the "EAPO scores best" row's
  numbers); its answers' shape pooled over its seeds' ``samples.jsonl``
  (``eapo.evaluation.answer_shape_of_samples``, split at the first ``</advice>``, 4-grams); the premise
  check (a pooled ``text_after_close`` above 0.02) is the first thing ``report.md`` says when it fires.
* Claim 9: the 15 rows the controls study also decided, this study's verdict beside
  ``../study-cpu-controls/claims.json``'s: *changed*, *unchanged*, or *not measured* while this study's
  row is; each changed row gives the quantity's intervals in both studies.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eapo.evaluation.answers import answer_shape_of_samples
from eapo.run_dir import read_jsonl, training_finished
from eapo.study import (
    NOT_MEASURED,
    SERIES_KEYS,
    Interval,
    assess,
    avg_interval,
    collect_method_data,
    interval_text,
    plan_study,
    read_study_config,
    run_role,
    study_claims,
    study_params,
)
from eapo.study.run import incomplete_configurations
from eapo.sweep.plan import SweepRun

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CONFIG = ROOT / "configs" / "study_cpu_stop.yaml"
CONTROLS_CLAIMS = HERE.parent / "study-cpu-controls" / "claims.json"
CLAIMS_FILE = "configs/study_cpu_stop.claims.yaml"
PLAN = "docs/results/study-cpu-stop/plan.md"

#: plan.md, Definitions: "the first / last 10% of a run's steps".
WINDOW = 0.1
#: plan.md, claim 8: "if any configuration's pooled `text_after_close` exceeds 0.02".
PREMISE_SHARE = 0.02
#: plan.md, claim 8: "the share with text after `</advice>`" and "distinct 4-grams".
CLOSE_TAG = "</advice>"
NGRAM = 4

#: The study's settings and its claims file (claims 1-8), as ``eapo study`` reads them.
SETTINGS = read_study_config(CONFIG)[0]
CLAIMS = study_claims(SETTINGS, CONFIG)

#: plan.md's configurations (eapo.study.roles.run_role -> label), in its order.
CONFIGURATIONS: dict[str, str] = {
    "grpo": "GRPO",
    "psr": "PSR",
    "nsr": "NSR",
    "eapo": "EAPO w0=0.2",
    "eapo:w0=1": "EAPO w0=1.0",
    "eapo_pi": "EAPO w0=0.2 + integral",
    "entropic": "EntroPIC",
    "adaptive_entropy": "Adaptive entropy",
}

#: Claim 9's 15 rows: (plan.md's claim number, the row's key in both studies' claims.json).
COMPARED: tuple[tuple[str, str], ...] = (
    ("1", "grpo_collapses"),
    ("1", "psr_collapses"),
    ("3", "eapo_w0_0.2_closer_than_grpo"),
    ("3", "eapo_w0_0.2_closer_than_psr"),
    ("3", "eapo_w0_1.0_closer_than_grpo"),
    ("3", "eapo_w0_1.0_closer_than_psr"),
    ("4", "controller_engaged_w0_0.2"),
    ("4", "controller_engaged_w0_1.0"),
    ("5", "operating_regime"),
    ("6", "similar_trajectory"),
    ("7", "entropic_holds_entropy"),
    ("7", "eapo_pi_holds_entropy"),
    ("7", "adaptive_entropy_holds_entropy"),
    ("8", "eapo_best_avg"),
    ("8", "eapo_best_avg_strict"),
)

#: Each rule quoted from plan.md ("The claims and their rules"; whitespace joined), by claim: claims 1-8's
#: from the claims file (its rule ids are plan.md's claim numbers), the rest this report's.
RULES: dict[str, str] = {
    **CLAIMS.rules,
    "8-ranking": "Every configuration's Avg and strict-Avg interval is reported, ranked by mean, and its "
    "evaluation's answer shape (pooled over its three seeds' `samples.jsonl`: the share with text after "
    "`</advice>`, `text_after_close`, and distinct 4-grams, `distinct_ngrams`, of "
    "`eapo.evaluation.answer_shape`).",
    "8-premise": "The shape carries no verdict of its own, with one check: if any configuration's pooled "
    "`text_after_close` exceeds 0.02, the report says so first, since the study's premise (no answer runs on) "
    "then failed for it.",
    "9": 'For each claim the controls study also decided (claims 1, 3, 4, 5, 6, 7 and 8\'s two "EAPO best" '
    "rows: 15 rows), the report sets its verdict beside the controls study's "
    "(`../study-cpu-controls/claims.json`) and says **changed** or **unchanged**. For each changed row it gives "
    "the numbers that moved (the quantity's interval in both studies); the README's \"why\" is an "
    "interpretation of those numbers and is labelled as one.",
    "not measured": 'A claim whose runs are missing, failed or did not log the metric is "**not measured**".',
}

#: The quantity each claim's row is about (plan.md's words).
QUANTITIES: dict[str, str] = {
    "1": "start- and end-window intervals of entropy/rollout (nats/token)",
    "2": "end-window interval of r_t = entropy/rollout ÷ H_0",
    "3": "deviation |end/H_0 − 1| of the end-window interval of r_t",
    "4": "end-window interval of eapo/w_pos ÷ w0",
    "5": "end-window intervals of eapo/w_pos at w0 = 0.2 and w0 = 1.0",
    "6": "second-half window interval of d_t = r_t(w0=1.0) − r_t(w0=0.2), paired by seed",
    "7": "second-half window interval of r_t",
    "8": "Avg (or strict Avg) interval of every configuration",
    "8-shape": "pooled answer shape of each configuration's evaluation (text_after_close, distinct_ngrams)",
}

#: The configurations each row of claims 1-8 reads (to say which are missing when not measured).
ROLES_OF: dict[str, tuple[str, ...]] = {
    "grpo_collapses": ("grpo",),
    "psr_collapses": ("psr",),
    "nsr_above_psr": ("nsr", "psr"),
    "eapo_w0_0.2_closer_than_grpo": ("eapo", "grpo"),
    "eapo_w0_0.2_closer_than_psr": ("eapo", "psr"),
    "eapo_w0_1.0_closer_than_grpo": ("eapo:w0=1", "grpo"),
    "eapo_w0_1.0_closer_than_psr": ("eapo:w0=1", "psr"),
    "controller_engaged_w0_0.2": ("eapo",),
    "controller_engaged_w0_1.0": ("eapo:w0=1",),
    "operating_regime": ("eapo", "eapo:w0=1"),
    "similar_trajectory": ("eapo", "eapo:w0=1"),
    "entropic_holds_entropy": ("entropic",),
    "eapo_pi_holds_entropy": ("eapo_pi",),
    "adaptive_entropy_holds_entropy": ("adaptive_entropy",),
    "eapo_best_avg": tuple(CONFIGURATIONS),
    "eapo_best_avg_strict": tuple(CONFIGURATIONS),
}
#: Claim 8's two "EAPO scores best" rows: key -> the Avg they read.
BEST = {"eapo_best_avg": ("avg", "Avg"), "eapo_best_avg_strict": ("avg_strict", "strict Avg")}

REPORTED = "reported (no verdict)"
PREMISE_FAILED = "premise failed"
PREMISE_HELD = "premise held"
CHANGED, UNCHANGED = "changed", "unchanged"


class ReportError(ValueError):
    """A study file this report cannot read (the message names it)."""


# --------------------------------------------------------------------------------------------
# Reading the study
# --------------------------------------------------------------------------------------------


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ReportError(f"{path}: not valid JSON ({error})") from error
    except OSError as error:
        raise ReportError(f"{path}: cannot be read ({error})") from error
    if not isinstance(payload, dict):
        raise ReportError(f"{path}: expected a JSON object, got {type(payload).__name__}")
    return payload


def planned_runs(study_dir: Path) -> tuple[list[SweepRun], str]:
    """The study's runs, from its ``sweep.json`` (else the plan of :data:`CONFIG`), and where they came from."""
    manifest = study_dir / "sweep.json"
    if not manifest.exists():
        settings, _ = read_study_config(CONFIG)
        return plan_study(settings.seeds, settings.runs), str(CONFIG)
    records = _read_json_object(manifest).get("runs")
    if not isinstance(records, Mapping) or not records:
        raise ReportError(f"{manifest}: expected a non-empty 'runs' mapping of run name -> record")
    runs = []
    for name, record in records.items():
        try:
            run = SweepRun(
                str(record["method"]),
                tuple(sorted((str(k), float(v)) for k, v in (record.get("weights") or {}).items())),
                record.get("seed"),
                record.get("label"),
                tuple((record.get("extra") or {}).items()),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ReportError(
                f"{manifest}: run {name!r} is not a sweep record with method/weights/seed/label ({error!r})"
            ) from error
        if run.name != name:
            raise ReportError(f"{manifest}: run {name!r} has the fields of a run named {run.name!r}")
        runs.append(run)
    return runs, str(manifest)


def _status(study_dir: Path, run: SweepRun) -> dict[str, Any]:
    """One planned run: finished (trained to its end and evaluated), evaluating, training or not started."""
    run_dir = study_dir / "runs" / run.name
    metrics = run_dir / "metrics.jsonl"
    try:
        steps = [row.get("step") for row in read_jsonl(metrics)] if metrics.exists() else []
    except ValueError as error:  # read_jsonl names the file and line
        raise ReportError(str(error)) from error
    last = max((s for s in steps if isinstance(s, int)), default=0)
    trained = training_finished(run_dir)
    evaluated = (run_dir / "eval" / "results.json").is_file()
    status = (
        "finished"
        if trained and evaluated
        else "evaluating"
        if trained
        else "training"
        if metrics.exists()
        else "not started"
    )
    return {
        "label": run.label,
        "role": run_role(run.method, dict(run.weights)),
        "seed": run.seed,
        "status": status,
        "last_step": last,
    }


def _shape(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """plan.md's answer shape: ``eapo.evaluation.answer_shape`` at the first ``</advice>``, 4-grams."""
    shape = answer_shape_of_samples(samples, close_tag=CLOSE_TAG, split="first", ngram=NGRAM)
    return {k: shape[k] for k in ("n", "text_after_close", "distinct_ngrams", "cut_at_cap", "no_close_tag")}


def _check_results(path: Path) -> dict[str, Any]:
    """An ``eapo eval`` results.json, checked for what the Avg intervals read."""
    payload = _read_json_object(path)
    if not isinstance(payload.get("metrics"), Mapping):
        raise ReportError(f"{path}: no 'metrics' mapping (is it an eapo eval results.json?)")
    for key in ("avg", "avg_strict"):
        ci = (payload.get("ci95") or {}).get(key)
        if ci is not None and (not isinstance(ci, Sequence) or len(ci) != 2):
            raise ReportError(f"{path}: ci95.{key} must be [low, high], got {ci!r}")
        value = payload["metrics"].get(key)
        if value is not None and not isinstance(value, int | float):
            raise ReportError(f"{path}: metrics.{key} must be a number, got {value!r}")
    return payload


def _samples(path: Path) -> list[dict[str, Any]]:
    try:
        rows = read_jsonl(path)
    except ValueError as error:
        raise ReportError(str(error)) from error
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, Mapping) or not isinstance(row.get("completion"), str):
            raise ReportError(f"{path}: sample {number} has no 'completion' string")
    return rows


# --------------------------------------------------------------------------------------------
# The claims
# --------------------------------------------------------------------------------------------


def _interval(value: Any) -> dict[str, float] | None:
    if isinstance(value, Interval):
        return asdict(value)
    if isinstance(value, Mapping) and {"mean", "low", "high"} <= set(value):
        return {k: value[k] for k in ("mean", "low", "high", "n") if k in value}
    return None


def _intervals(numbers: Mapping[str, Any]) -> dict[str, dict[str, float] | None]:
    """The interval-valued entries of a claim's numbers (an unmeasured one: ``None``), by its name there."""
    out: dict[str, dict[str, float] | None] = {}
    for key, value in numbers.items():
        if value is None or _interval(value) is not None:
            out[CONFIGURATIONS.get(key, key)] = _interval(value)
    return out


def _text(interval: Mapping[str, float] | Interval | None, digits: int = 3) -> str:
    if isinstance(interval, Mapping):
        interval = Interval(interval["mean"], interval["low"], interval["high"])
    return interval_text(interval, digits)


def _why_missing(roles: Sequence[str], progress: Mapping[str, tuple[int, int]]) -> str:
    parts = []
    for role in roles:
        done, planned = progress.get(role, (0, 0))
        if not planned:
            parts.append(f"{CONFIGURATIONS.get(role, role)}: no run")
        elif done < planned:
            parts.append(f"{CONFIGURATIONS.get(role, role)}: {done} of {planned} runs finished")
    return ("not all runs finished (" + "; ".join(parts) + ")") if parts else "the metric was not logged"


def build_report(study_dir: Path, controls_claims: Path = CONTROLS_CLAIMS) -> dict[str, Any]:
    """Every claim row of plan.md for the study in ``study_dir`` (see the module docstring)."""
    study_dir = Path(study_dir)
    if not study_dir.is_dir():
        raise ReportError(f"{study_dir}: no such study directory")
    runs, source = planned_runs(study_dir)
    statuses = {run.name: _status(study_dir, run) for run in runs}
    incomplete = incomplete_configurations(study_dir, runs)
    progress: dict[str, tuple[int, int]] = {}
    for state in statuses.values():
        done, planned = progress.get(state["role"], (0, 0))
        progress[state["role"]] = (done + (state["status"] == "finished"), planned + 1)
    complete = [role for role in CONFIGURATIONS if role in progress and role not in incomplete]

    # every finished run's evaluation, checked before any number is taken from it
    run_samples: dict[str, list[dict[str, Any]] | None] = {}
    for run in runs:
        state = statuses[run.name]
        if state["status"] != "finished":
            continue
        eval_dir = study_dir / "runs" / run.name / "eval"
        results = _check_results(eval_dir / "results.json")
        found = _samples(eval_dir / "samples.jsonl") if (eval_dir / "samples.jsonl").is_file() else None
        run_samples[run.name] = found
        state["avg"] = _interval(avg_interval([results], "avg"))
        state["avg_strict"] = _interval(avg_interval([results], "avg_strict"))
        state["answers"] = _shape(found) if found else None
    # per finished configuration, its seeds' samples pooled (a seed without samples: not measured)
    samples: dict[str, list[dict[str, Any]] | None] = {}
    for role in complete:
        parts = [run_samples[run.name] for run in runs if statuses[run.name]["role"] == role]
        samples[role] = None if any(p is None for p in parts) else [row for p in parts for row in p]  # type: ignore[union-attr]
    data = collect_method_data(study_dir, runs, skip=incomplete, keys=[*SERIES_KEYS, *CLAIMS.metrics])
    data = {role: d for role, d in data.items() if role in complete}

    # Claims 1-8's verdicts: the claims file, judged by eapo.study's engine (as eapo study judges it)
    assessment = assess(CLAIMS, data, study_params(WINDOW, SETTINGS.entropy_band, SETTINGS.max_clipped_share))
    decided_by = f"{CLAIMS_FILE} (eapo.study.claims.assess; study.claims of configs/study_cpu_stop.yaml)"
    rows: list[dict[str, Any]] = []
    for spec, claim in zip(CLAIMS.groups["claims"], assessment.claims["claims"], strict=True):
        number = spec.rule  # the claims file's rule ids are plan.md's claim numbers
        row: dict[str, Any] = {
            "claim": number,
            "key": claim.key,
            "statement": claim.statement,
            "quantity": QUANTITIES[number],
            "intervals": _intervals(claim.numbers),
        }
        if claim.key in BEST:  # claim 8: the ranking of every configuration, then "EAPO scores best"
            key, name = BEST[claim.key]
            avgs = {role: claim.numbers[role] for role in CONFIGURATIONS}
            ranking = list(claim.numbers["ranking"])
            unmeasured = [r for r in CONFIGURATIONS if avgs[r] is None]
            row["quantity"] = QUANTITIES["8"].replace("Avg (or strict Avg)", name)
            row["ranking"] = [CONFIGURATIONS[r] for r in ranking]
            rows.append(
                {
                    "claim": "8",
                    "key": f"ranking_{key}",
                    "statement": f"Every configuration's {name} interval, ranked by mean",
                    "quantity": row["quantity"],
                    "intervals": dict(row["intervals"]),
                    "ranking": row["ranking"],
                    "verdict": REPORTED,
                    "evidence": "; ".join(f"{CONFIGURATIONS[r]} {_text(avgs[r])}" for r in ranking)
                    + (f" (not measured: {_why_missing(unmeasured, progress)})" if unmeasured else ""),
                    "rule": RULES["8-ranking"],
                    "decided_by": "eapo.study.stats.avg_interval",
                }
            )
        row |= {
            "verdict": claim.verdict,
            "evidence": claim.evidence
            if claim.verdict != NOT_MEASURED
            else _why_missing(ROLES_OF[claim.key], progress),
            "rule": RULES[number],
            "decided_by": decided_by,
        }
        rows.append(row)

    shapes = {role: _shape(samples[role]) if samples.get(role) else None for role in CONFIGURATIONS}
    failed = [
        role
        for role, shape in shapes.items()
        if shape is not None
        and shape["text_after_close"] is not None
        and shape["text_after_close"] > PREMISE_SHARE
    ]
    unshaped = [role for role, shape in shapes.items() if shape is None]
    premise = PREMISE_FAILED if failed else NOT_MEASURED if unshaped else PREMISE_HELD
    shape_numbers = {CONFIGURATIONS[role]: shape for role, shape in shapes.items()}
    rows.append(
        {
            "claim": "8",
            "key": "answer_shape",
            "statement": "Each configuration's answers' shape, pooled over its seeds",
            "quantity": QUANTITIES["8-shape"],
            "intervals": {},
            "shapes": shape_numbers,
            "verdict": REPORTED,
            "evidence": "; ".join(
                f"{CONFIGURATIONS[r]} text_after_close {s['text_after_close']:.3f}, distinct_ngrams "
                + ("–" if s["distinct_ngrams"] is None else f"{s['distinct_ngrams']:.3f}")
                for r, s in shapes.items()
                if s is not None
            )
            or "no configuration has finished",
            "rule": RULES["8-ranking"],
            "decided_by": "eapo.evaluation.answer_shape_of_samples (close tag </advice>, first split, 4-grams)",
        }
    )
    rows.append(
        {
            "claim": "8",
            "key": "premise",
            "statement": f"No configuration's pooled text_after_close exceeds {PREMISE_SHARE}",
            "quantity": "pooled text_after_close of each configuration",
            "intervals": {},
            "failed_for": [CONFIGURATIONS[r] for r in failed],
            "not_measured_for": [CONFIGURATIONS[r] for r in unshaped],
            "verdict": premise,
            "evidence": (
                "the premise failed for "
                + ", ".join(f"{CONFIGURATIONS[r]} ({shapes[r]['text_after_close']:.3f})" for r in failed)  # type: ignore[index]
                if failed
                else f"no finished configuration exceeds {PREMISE_SHARE}"
                if len(unshaped) < len(CONFIGURATIONS)
                else "no configuration has finished"
            )
            + (f"; not measured: {_why_missing(unshaped, progress)}" if unshaped else ""),
            "rule": RULES["8-premise"],
            "decided_by": f"pooled text_after_close > {PREMISE_SHARE}",
        }
    )

    # Claim 9: the 15 rows beside the controls study's
    controls = _read_json_object(controls_claims)
    theirs = {c.get("key"): c for c in controls.get("claims") or [] if isinstance(c, Mapping)}
    ours = {row["key"]: row for row in rows}
    for number, key in COMPARED:
        if key not in theirs or "verdict" not in theirs[key]:
            raise ReportError(
                f"{controls_claims}: no claim {key!r} with a verdict (is it the controls study's?)"
            )
        mine, before = ours[key], theirs[key]
        status = (
            NOT_MEASURED
            if mine["verdict"] == NOT_MEASURED
            else CHANGED
            if mine["verdict"] != before["verdict"]
            else UNCHANGED
        )
        row = {
            "claim": "9",
            "key": f"compare_{key}",
            "compares": key,
            "compares_claim": number,
            "statement": mine["statement"],
            "quantity": mine["quantity"],
            "controls_verdict": before["verdict"],
            "this_verdict": mine["verdict"],
            "verdict": status,
            "rule": RULES["9"],
            "decided_by": "this study's row beside ../study-cpu-controls/claims.json's",
        }
        if status == CHANGED:
            row["intervals"] = {
                "controls": _intervals(before.get("numbers") or {}),
                "this study": mine["intervals"],
            }
        else:
            row["intervals"] = {}
        rows.append(row)

    # eapo study's own claims.json, when it has written one: its verdicts beside this report's
    written = study_dir / "claims.json"
    beside: dict[str, Any] = {"path": str(written), "present": written.exists(), "differences": []}
    if written.exists():
        payload = _read_json_object(written)
        beside["report_only"] = payload.get("report_only")
        for claim in payload.get("claims") or []:
            if isinstance(claim, Mapping) and claim.get("key") in ours:
                if claim.get("verdict") != ours[claim["key"]]["verdict"]:
                    beside["differences"].append(
                        {
                            "key": claim["key"],
                            "claims.json": claim.get("verdict"),
                            "report": ours[claim["key"]]["verdict"],
                        }
                    )

    rows.sort(key=lambda row: int(row["claim"]))  # plan.md's order (stable within a claim)
    return {
        "study_dir": str(study_dir),
        "plan": PLAN,
        "planned_runs_from": source,
        "controls_claims": str(controls_claims),
        "window": WINDOW,
        "runs": statuses,
        "configurations": {
            CONFIGURATIONS.get(role, role): {
                "role": role,
                "finished": progress.get(role, (0, 0))[0],
                "planned": progress.get(role, (0, 0))[1],
                "complete": role in complete,
            }
            for role in dict.fromkeys([*CONFIGURATIONS, *progress])
        },
        "premise": {"verdict": premise, "failed_for": [CONFIGURATIONS[r] for r in failed]},
        "claims": rows,
        "regime_runs": assessment.tables["regime_runs"],
        "eapo_study_claims": beside,
        "not_measured_rule": RULES["not measured"],
    }


# --------------------------------------------------------------------------------------------
# report.md
# --------------------------------------------------------------------------------------------


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _number(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def report_markdown(report: Mapping[str, Any]) -> str:
    rows = report["claims"]
    premise = report["premise"]
    lines = ["# The stop study: claims 2, 8 and 9 (and 1-7 beside them)", ""]
    if premise["verdict"] == PREMISE_FAILED:  # plan.md, claim 8: "the report says so first"
        shape = next(r for r in rows if r["key"] == "answer_shape")["shapes"]
        lines += [
            "**The study's premise failed** (no answer runs on): pooled `text_after_close` above "
            f"{PREMISE_SHARE} for "
            + ", ".join(
                f"{label} ({shape[label]['text_after_close']:.3f})" for label in premise["failed_for"]
            )
            + ".",
            "",
        ]
    configurations = report["configurations"]
    finished = sum(state["status"] == "finished" for state in report["runs"].values())
    lines += [
        f"Written by `docs/results/study-cpu-stop/report.py` from `{report['study_dir']}` (planned runs: "
        f"`{report['planned_runs_from']}`); the rules are `{report['plan']}`'s, quoted below. "
        f"{finished} of {len(report['runs'])} runs finished. A configuration counts once all its runs have "
        "finished; until then its claims are **not measured**.",
        "",
        "| Configuration | Runs finished | Counted |",
        "|---|---|---|",
    ]
    for label, state in configurations.items():
        lines.append(
            f"| {label} | {state['finished']} of {state['planned']} | {'yes' if state['complete'] else 'no'} |"
        )
    lines += [
        "",
        "Run by run (a finished run's own evaluation: no verdict is taken from one run):",
        "",
        "| Run | Status | Last step logged | Avg | Avg (strict) | text_after_close | distinct_ngrams |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, state in report["runs"].items():
        answers = state.get("answers") or {}
        lines.append(
            f"| {name} | {state['status']} | {state['last_step']} | {_text(state.get('avg'))} | "
            f"{_text(state.get('avg_strict'))} | {_number(answers.get('text_after_close'))} | "
            f"{_number(answers.get('distinct_ngrams'))} |"
        )

    def verdict_table(selected: Sequence[Mapping[str, Any]]) -> list[str]:
        out = ["| Claim | Statement | Verdict | Numbers |", "|---|---|---|---|"]
        for row in selected:
            out.append(
                f"| {row['claim']} | {_cell(row['statement'])} | **{row['verdict']}** | {_cell(row['evidence'])} |"
            )
        return out

    lines += ["", "## Claim 2: NSR keeps a higher entropy than PSR", ""]
    lines += verdict_table([r for r in rows if r["claim"] == "2"])
    lines += ["", f"Rule (plan.md): {RULES['2']}", ""]

    lines += ["## Claim 8: the Avg and strict-Avg ranking, and the answers' shape", ""]
    for key in ("ranking_avg", "ranking_avg_strict"):
        row = next(r for r in rows if r["key"] == key)
        lines += [
            f"{row['statement']} (95% intervals, seeds pooled):",
            "",
            "| Rank | Configuration | Interval |",
        ]
        lines.append("|---|---|---|")
        ranked = row["ranking"] + [label for label, v in row["intervals"].items() if v is None]
        for rank, label in enumerate(ranked, start=1):
            interval = row["intervals"][label]
            lines.append(
                f"| {rank if interval else '–'} | {label} | {_text(interval) if interval else NOT_MEASURED} |"
            )
        lines.append("")
    lines += verdict_table([r for r in rows if r["key"] in ("eapo_best_avg", "eapo_best_avg_strict")])
    shapes = next(r for r in rows if r["key"] == "answer_shape")["shapes"]
    lines += [
        "",
        "The answers' shape, pooled over each configuration's seeds (no verdict of its own): the share of answers "
        "with text after the first `</advice>` and the distinct-4-gram ratio.",
        "",
        "| Configuration | Answers | text_after_close | distinct_ngrams | Cut at the cap | No closing tag |",
        "|---|---|---|---|---|---|",
    ]
    for label, shape in shapes.items():
        if shape is None:
            lines.append(f"| {label} | {NOT_MEASURED} | – | – | – | – |")
        else:
            lines.append(
                f"| {label} | {shape['n']} | {_number(shape['text_after_close'])} | "
                f"{_number(shape['distinct_ngrams'])} | {_number(shape['cut_at_cap'])} | "
                f"{_number(shape['no_close_tag'])} |"
            )
    lines += [""]
    lines += verdict_table([r for r in rows if r["key"] == "premise"])
    lines += [
        "",
        f"Rules (plan.md): {RULES['8-ranking']} {RULES['8']} {RULES['8-premise']}",
        "",
        "## Claim 9: this study's verdicts beside the controls study's",
        "",
        "| Claim | Statement | Controls study | This study | Comparison |",
        "|---|---|---|---|---|",
    ]
    compared = [r for r in rows if r["claim"] == "9"]
    for row in compared:
        lines.append(
            f"| {row['compares_claim']} | {_cell(row['statement'])} | {row['controls_verdict']} | "
            f"{row['this_verdict']} | **{row['verdict']}** |"
        )
    changed = [r for r in compared if r["verdict"] == CHANGED]
    if changed:
        lines += ["", "The numbers that moved (95% intervals):", ""]
        for row in changed:
            before, after = row["intervals"]["controls"], row["intervals"]["this study"]
            names = list(dict.fromkeys([*before, *after]))
            parts = [
                f"{name}: {_text(before.get(name)) if before.get(name) else '–'} → "
                f"{_text(after.get(name)) if after.get(name) else '–'}"
                for name in names
            ]
            lines.append(
                f"- **{_cell(row['statement'])}** ({row['controls_verdict']} → {row['this_verdict']}): "
                + "; ".join(parts)
            )
    lines += ["", f"Rule (plan.md): {RULES['9']}", ""]

    lines += [f"## Claims 1 and 3-7 (`{CLAIMS_FILE}`, as `eapo study` decides them)", ""]
    lines += verdict_table([r for r in rows if r["claim"] in ("1", "3", "4", "5", "6", "7")])
    regime = report.get("regime_runs") or []
    if regime:
        lines += [
            "",
            "Claim 5, run by run: the algebra's w0 · r_end beside the logged end-window w+.",
            "",
            "| Configuration | Seed | w0 | End r | Predicted w0 · r_end | Logged end-window w+ |",
            "|---|---|---|---|---|---|",
        ]
        for run in regime:
            lines.append(
                f"| {CONFIGURATIONS.get(run['role'], run['role'])} | {run['seed']} | {run['w0']:g} | "
                f"{_number(run['r_end'])} | {_number(run['predicted_w_pos'])} | {_number(run['logged_w_pos'])} |"
            )
    lines += ["", "Rules (plan.md):", ""]
    lines += [f"- claim {number}: {RULES[number]}" for number in ("1", "3", "4", "5", "6", "7")]
    lines += [f"- {RULES['not measured']}", ""]
    beside = report["eapo_study_claims"]
    if beside["present"]:
        differences = beside["differences"]
        lines += [
            f"`eapo study`'s `{beside['path']}` ("
            + ("interim" if beside.get("report_only") else "final")
            + "): "
            + (
                "its verdicts differ from this report's on "
                + "; ".join(f"{d['key']} ({d['claims.json']} there, {d['report']} here)" for d in differences)
                + ". Both judge the same claims file, so a difference means that file was written from other "
                "runs (an interim report before the runs finished) or by another claims file."
                if differences
                else "every verdict it holds is this report's."
            ),
            "",
        ]
    else:
        lines += [f"`eapo study` has not written `{beside['path']}` yet.", ""]
    return "\n".join(lines)


def write_report(
    study_dir: Path, controls_claims: Path = CONTROLS_CLAIMS, out: Path | None = None
) -> dict[str, Any]:
    """:func:`build_report` written as ``report.json`` and ``report.md`` into ``out`` (default: ``study_dir``)."""
    report = build_report(study_dir, controls_claims)
    out = Path(out or study_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(
        json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out / "report.md").write_text(report_markdown(report), encoding="utf-8")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "study_dir", nargs="?", default=str(HERE), help="the study directory (default: this one)"
    )
    parser.add_argument("--controls", default=str(CONTROLS_CLAIMS), help="the controls study's claims.json")
    parser.add_argument("--out", default=None, help="where report.json / report.md go (default: STUDY_DIR)")
    args = parser.parse_args(argv)
    study_dir = Path(args.study_dir)
    out = Path(args.out or study_dir)
    try:
        report = write_report(study_dir, Path(args.controls), out)
    except ReportError as error:
        print(f"report.py: {error}", file=sys.stderr)
        return 2
    finished = sum(state["status"] == "finished" for state in report["runs"].values())
    print(f"{finished} of {len(report['runs'])} runs finished; wrote {out / 'report.json'} and report.md")
    for row in report["claims"]:
        if row["verdict"] != REPORTED:
            print(f"claim {row['claim']}: {row['statement']}: {row['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
