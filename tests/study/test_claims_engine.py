"""The claims engine (eapo.study.claims and its registries): a claims file judged over hand-built runs
with hand-derived intervals, each comparison kind, the templates and the reasons a claim is not measured,
tables per configuration and per run, a comparison registered from outside the package, and the errors a
bad claims file gets (they name the file, the claim and the field)."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import pytest
import yaml

from eapo.study import (
    COMPARISONS,
    HELD,
    NOT_HELD,
    NOT_MEASURED,
    WITHIN_NOISE,
    ClaimsError,
    Interval,
    MethodData,
    assess,
    claims_markdown,
    claims_payload,
    load_claims,
    read_study_config,
    register_comparison,
    resolve_claims,
    study_claims,
    study_params,
)
from eapo.study.claims_file import PACKAGED
from eapo.study.templates import TemplateFormatter

ROOT = Path(__file__).resolve().parents[2]
Z = 1.959963984540054
PARAMS = study_params(0.1, 0.1, 0.1)


def _runs(*series: list[float], h0: float | None = None, results=(), seeds=None) -> MethodData:
    """A configuration whose runs logged ``entropy/rollout`` = each series (seeds 0, 1, ...)."""
    d = MethodData()
    for seed, values in zip(seeds or range(len(series)), series, strict=True):
        d.series.setdefault("entropy/rollout", []).append(list(values))
        d.h0.append(h0)
        d.seeds.append(seed)
        d.runs.append(f"run-seed{seed}")
    d.results = list(results)
    return d


def _file(tmp_path: Path, text: str, name: str = "x.claims.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


RISE = """\
title: A study
names: {a: Config A, b: Config B}
params: {band: 0.25}
rules: {rise: "held if the end window lies entirely above the start window"}
groups:
  claims:
    - id: a_rises
      statement: A raises entropy (band {band:.0%})
      quote: entropy rises
      section: Section 1
      rule: rise
      quantities:
        start: {stat: window, at: start, metric: entropy/rollout, role: a}
        end: {stat: window, at: end, metric: entropy/rollout, role: a}
      compare: raises
      evidence: "A: start {start} → end {end:2}"
      missing: {why: runs, roles: [a], what: entropy}
"""


# --------------------------------------------------------------------------------------------
# A claim judged, by hand
# --------------------------------------------------------------------------------------------


def test_a_claim_of_a_file_judged_over_hand_built_runs(tmp_path):
    """10 steps 1..10: windows of 3 (the minimum). start [1, 2, 3]: mean 2, s² = 1, lag-1 autocorrelation 0,
    SE = √(1/3); end [8, 9, 10]: mean 9, the same SE. The end lies entirely above the start: held."""
    claims = load_claims(_file(tmp_path, RISE))
    (claim,) = assess(claims, {"a": _runs([float(t) for t in range(1, 11)])}, PARAMS).claims["claims"]
    half = Z * math.sqrt(1 / 3)
    assert claim.verdict == HELD
    start, end = claim.numbers["start"], claim.numbers["end"]
    assert (start.mean, start.low, start.high, start.n) == pytest.approx((2.0, 2 - half, 2 + half, 3))
    assert (end.mean, end.low, end.high) == pytest.approx((9.0, 9 - half, 9 + half))
    assert (
        claim.evidence
        == f"A: start 2.000 [{2 - half:.3f}, {2 + half:.3f}] → end 9.00 [{9 - half:.2f}, {9 + half:.2f}]"
    )
    assert claim.statement == "A raises entropy (band 25%)"  # a parameter in a statement
    assert claim.record() == {
        "key": "a_rises",
        "statement": "A raises entropy (band 25%)",
        "verdict": HELD,
        "evidence": claim.evidence,
        "numbers": {"start": start, "end": end},
        "quote": "entropy rises",
        "section": "Section 1",
        "rule": "held if the end window lies entirely above the start window",
        "basis": "paper",
    }
    # no run, then too few steps: not measured, and the reason names the configuration
    (claim,) = assess(claims, {}, PARAMS).claims["claims"]
    assert (claim.verdict, claim.evidence) == (NOT_MEASURED, "no finished run of Config A")
    (claim,) = assess(claims, {"a": _runs([1.0] * 5)}, PARAMS).claims["claims"]
    assert claim.evidence == "entropy not measured (too few logged steps, or not logged)"
    markdown = claims_markdown(claims, assess(claims, {"a": _runs([float(t) for t in range(1, 11)])}, PARAMS))
    assert "| A raises entropy (band 25%) | **held** | A: start 2.000 [" in markdown  # the default layout
    assert "- **A raises entropy (band 25%)**: held if the end window lies entirely above" in markdown
    # flat entropy: the windows overlap
    wiggle = [1.0 + (0.01 if t % 2 else -0.01) for t in range(10)]
    assert assess(claims, {"a": _runs(wiggle)}, PARAMS).claims["claims"][0].verdict == WITHIN_NOISE


@pytest.mark.parametrize(
    ("kind", "arguments", "verdict"),
    [
        ("lowers", {"start": (2, 1.9, 2.1), "end": (1, 0.9, 1.1)}, HELD),
        ("lowers", {"start": (1, 0.9, 1.1), "end": (2, 1.9, 2.1)}, NOT_HELD),
        ("raises", {"start": (1, 0.9, 1.1), "end": (1.1, 1.0, 1.2)}, WITHIN_NOISE),
        ("inside", {"value": (1.0, 0.95, 1.05)}, HELD),  # band [0.9, 1.1]
        ("inside", {"value": (1.3, 1.2, 1.4)}, NOT_HELD),
        ("inside", {"value": (1.1, 1.05, 1.15)}, WITHIN_NOISE),
        ("outside", {"value": (1.3, 1.2, 1.4)}, HELD),
        ("outside", {"value": (1.0, 0.95, 1.05)}, NOT_HELD),
        ("above_all", {"target": (3, 2.9, 3.1), "o1": (1, 0.9, 1.1), "o2": (2, 1.9, 2.1)}, HELD),
        ("above_all", {"target": (2, 1.9, 2.1), "o1": (3, 2.9, 3.1), "o2": (1, 0.9, 1.1)}, NOT_HELD),
        ("above_all", {"target": (2, 1.9, 2.1), "o1": (2.1, 2.0, 2.2), "o2": None}, NOT_MEASURED),
        ("below", {"target": (1, 0.9, 1.1), "other": (2, 1.9, 2.1)}, HELD),
        ("below_value", {"value": (-0.1, -0.2, -0.05)}, HELD),  # threshold 0
        ("below_value", {"value": (0.1, -0.2, 0.3)}, WITHIN_NOISE),
        ("between", {"target": (2, 1.9, 2.1), "b1": (1, 0.9, 1.1), "b2": (3, 2.9, 3.1)}, HELD),
        ("between", {"target": (4, 3.9, 4.1), "b1": (1, 0.9, 1.1), "b2": (3, 2.9, 3.1)}, NOT_HELD),
        ("overlap", {"a": (1, 0.9, 1.1), "b": (1.15, 1.05, 1.25)}, HELD),
        ("overlap", {"a": (1, 0.9, 1.1), "b": (2, 1.9, 2.1)}, NOT_HELD),
    ],
)
def test_every_comparison_kind_on_hand_intervals(kind, arguments, verdict):
    comparison = COMPARISONS[kind]
    value = {k: None if v is None else Interval(*v) for k, v in arguments.items()}
    given = {"band": [0.9, 1.1], "threshold": 0.0}
    if kind == "above_all":
        given |= {"target": value["target"], "others": {k: v for k, v in value.items() if k != "target"}}
    elif kind == "between":
        given |= {"target": value["target"], "bounds": {"b1": value["b1"], "b2": value["b2"]}}
    else:
        given |= value
    assert (
        comparison.decide(**{k: given[k] for k in (*comparison.quantities, *comparison.numbers)}) == verdict
    )
    assert comparison.help  # the docstring, shown in the docs


def test_all_above_zero_and_parts_combine():
    decide = COMPARISONS["all_above_zero"].decide
    assert decide({"x": Interval(0.1, 0.05, 0.2), "y": Interval(0.2, 0.1, 0.3)}) == HELD
    assert decide({"x": Interval(0.1, 0.05, 0.2), "y": Interval(-0.2, -0.3, -0.1)}) == NOT_HELD
    assert decide({"x": Interval(0.1, -0.05, 0.2)}) == WITHIN_NOISE
    assert decide({}) == NOT_MEASURED


def test_templates_format_intervals_lists_roles_and_loops(tmp_path):
    """{x} three digits, {x:5} five, not measured '–', {h:.3f} a list joined, {r:name} a role's name; an
    each-loop over a roles: quantity (sorted, with a second roles: quantity by role) and over a list of
    quantities (ranked by mean, one skipped)."""
    formatter = TemplateFormatter({"a": "Config A"})
    values = {"x": Interval(0.123456, 0.1, 0.2), "none": None, "h": [1.23456, 2.0], "r": "a", "b": 0.12}
    assert formatter.vformat("{x} {x:5} {none} {h:.3f} {r:name} {b:.0%}", (), values) == (
        "0.123 [0.100, 0.200] 0.12346 [0.10000, 0.20000] – 1.235, 2.000 Config A 12%"
    )
    text = """\
    title: T
    names: {a: A, b: B, c: C}
    groups:
      claims:
        - id: loops
          statement: S
          quantities:
            all: {stat: avg, roles: [c, a, b]}
            gaps: {stat: difference, of: [top, all]}
            top: {stat: avg, role: a}
            qa: {stat: avg, role: a}
            qb: {stat: avg, role: b}
            qc: {stat: avg, role: c}
          compare: {kind: above_all, target: qa, others: [qb, qc]}
          evidence:
            - "sorted: "
            - {each: all, order: sorted, item: "{name} {value:1} (gap {gaps:1})"}
            - "; ranked: "
            - {each: [qa, qb, qc], order: ranked, skip: [qb], item: "{name}={value:2}", sep: ", "}
    """
    claims = load_claims(_file(tmp_path, text))

    def evaluated(avg: float) -> dict:
        return {"metrics": {"avg": avg}, "ci95": {"avg": [avg - 0.1, avg + 0.1]}}

    data = {role: _runs(results=[evaluated(avg)]) for role, avg in (("a", 0.5), ("b", 0.9), ("c", 0.3))}
    (claim,) = assess(claims, data, PARAMS).claims["claims"]
    assert claim.evidence == (
        "sorted: A 0.5 [0.4, 0.6] (gap 0.0 [-0.1, 0.1]); B 0.9 [0.8, 1.0] (gap -0.4 [-0.5, -0.3]); "
        "C 0.3 [0.2, 0.4] (gap 0.2 [0.1, 0.3]); ranked: A=0.50 [0.40, 0.60], C=0.30 [0.20, 0.40]"
    )
    assert claim.verdict == NOT_HELD  # B's 0.9 lies above A's 0.5
    assert list(claim.numbers["all"]) == ["c", "a", "b"]  # a roles: quantity keeps its roles' order


def test_reasons_a_claim_is_not_measured(tmp_path):
    """why: steps (per role: no run, too few steps, not logged), unevaluated (the roles without an Avg, by
    name or as written) and a text chosen by the quantity that was not measured (when)."""
    text = """\
    title: T
    names: {a: A, b: B}
    groups:
      claims:
        - id: slope
          statement: S
          quantities:
            a: {stat: slope, metric: entropy/rollout, role: a}
            b: {stat: slope, metric: entropy/rollout, role: b}
          compare: {kind: above_all, target: a, others: [b]}
          evidence: "{a} {b}"
          missing: {why: steps, roles: [a, b], what: entropy}
        - id: best
          statement: S
          quantities:
            a: {stat: avg, role: a}
            b: {stat: avg, role: b}
          compare: {kind: above_all, target: a, others: [b]}
          evidence: "{a}"
          missing: {why: unevaluated, roles: [a, b], names: false, text: "no evaluation for {why}"}
        - id: when
          statement: S
          quantities:
            a: {stat: avg, role: a}
            b: {stat: avg, role: b}
          compare: {kind: below, target: a, other: b}
          evidence: "{a}"
          missing: [{when: a, text: "no A"}, {text: "no B"}]
    """
    claims = load_claims(_file(tmp_path, text))
    evaluated = {"metrics": {"avg": 0.4}, "ci95": {"avg": [0.3, 0.5]}}
    data = {"a": _runs([1.0] * 4, results=[evaluated])}  # four steps: too few for two windows of three
    slope, best, when = assess(claims, data, PARAMS).claims["claims"]
    assert slope.evidence == (
        "A: 4 logged steps of entropy: too few for start and end windows of 3 steps each; B: no finished run"
    )
    assert (best.verdict, best.evidence) == (NOT_MEASURED, "no evaluation for b")
    assert when.evidence == "no B"
    data["b"], data["a"] = data["a"], _runs([1.0] * 4)
    assert assess(claims, data, PARAMS).claims["claims"][2].evidence == "no A"


def test_tables_per_configuration_and_per_run(tmp_path):
    """Row constants (with:) scale a series and leave a row without them None; except: leaves a row out; a
    per_seed table has one row per run, its series that run's alone."""
    text = """\
    title: T
    names: {a: A, b: B}
    groups:
      claims:
        - id: c
          statement: S
          quantities: {x: {stat: avg, role: a}}
          compare: {kind: below_value, value: x, threshold: 1}
          evidence: "{x}"
    tables:
      per_role:
        rows: [a, b]
        with: {a: {w0: 0.5}}
        quantities:
          seeds: {stat: seeds}
          scaled: {stat: window, at: end, metric: entropy/rollout, divide: w0}
          end: {stat: window, at: end, metric: entropy/rollout}
          a_end: {stat: window, at: end, metric: entropy/rollout, role: a}
          minus_a: {stat: difference, of: [end, a_end], except: [a]}
        columns: [seeds, scaled, end, minus_a]
      per_run:
        rows: [a]
        per_seed: true
        with: {a: {w0: 0.5}}
        quantities:
          seed: {stat: seed}
          end: {stat: window, at: end, metric: entropy/rollout, value: mean}
          twice: {stat: window, at: end, metric: entropy/rollout, value: mean, times: 2}
    markdown:
      - table: per_role
        heading: "## Per role"
        columns: [[Config, label], [Seeds, seeds], [Scaled, scaled, 1], [A minus, minus_a]]
      - table: per_run
        columns: [[Config, label], [Seed, seed], [End, end], [Twice, twice, .1f]]
    """
    claims = load_claims(_file(tmp_path, text))
    data = {"a": _runs([1.0] * 10, [3.0] * 10, seeds=[4, 7]), "b": _runs([5.0] * 10)}
    assessment = assess(claims, data, PARAMS)
    per_role, per_run = assessment.tables["per_role"], assessment.tables["per_run"]
    assert per_role["a"]["seeds"] == 2 and per_role["a"]["scaled"].mean == pytest.approx(
        4.0
    )  # (1 + 3) / 2 / 0.5
    assert per_role["b"]["scaled"] is None and per_role["a"]["minus_a"] is None
    assert per_role["b"]["minus_a"].mean == pytest.approx(3.0) and list(per_role["b"]) == [
        "seeds",
        "scaled",
        "end",
        "minus_a",
    ]
    assert per_run == [{"seed": 4, "end": 1.0, "twice": 2.0}, {"seed": 7, "end": 3.0, "twice": 6.0}]
    assert claims_markdown(claims, assessment, ["context line"]) == (
        "# T\n\ncontext line\n\n## Per role\n\n"
        "| Config | Seeds | Scaled | A minus |\n|---|---|---|---|\n"
        "| A | 2 | 4.0 [4.0, 4.0] | – |\n| B | 1 | – | 3.000 [3.000, 3.000] |\n\n"
        "| Config | Seed | End | Twice |\n|---|---|---|---|\n| A | 4 | 1.000 | 2.0 |\n| A | 7 | 3.000 | 6.0 |\n"
    )
    payload = claims_payload(claims, assessment)
    assert list(payload) == ["claims", "per_role", "per_run"]  # the default layout: groups, then tables
    assert payload["per_role"]["b"]["minus_a"] == {
        "mean": 3.0,
        "low": 3.0,
        "high": 3.0,
        "n": 9,
    }  # 3 + 3·2 values


def test_a_comparison_registered_outside_the_package_is_usable_in_a_claims_file(tmp_path):
    """A new kind is one registered function: the file names it, the loader checks its arguments."""

    @register_comparison("far_above", quantities=("value",), numbers=("threshold",))
    def far_above(value, threshold):
        """Held if the interval lies entirely above ``threshold``; did not hold otherwise."""
        if value is None:
            return NOT_MEASURED
        return HELD if value.low > threshold else NOT_HELD

    try:
        path = _file(
            tmp_path,
            RISE.replace("compare: raises", "compare: {kind: far_above, value: end, threshold: 5}"),
        )
        (claim,) = assess(load_claims(path), {"a": _runs([float(t) for t in range(1, 11)])}, PARAMS).claims[
            "claims"
        ]
        assert claim.verdict == HELD  # the end window 9 ± 1.13 lies above 5
        bad = _file(tmp_path, RISE.replace("compare: raises", "compare: {kind: far_above, value: end}"))
        with pytest.raises(ClaimsError, match=r"\(a_rises\)\.compare: far_above needs 'threshold'"):
            load_claims(bad)
    finally:
        COMPARISONS.pop("far_above")


# --------------------------------------------------------------------------------------------
# Bad claims files: the file, the claim and the field
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "stat: window, at: start",
            "stat: windows, at: start",
            r"\(a_rises\)\.quantities\.start\.stat: 'windows' is not a statistic; valid: window, slope",
        ),
        ("at: start,", "at: first,", r"\(a_rises\)\.quantities\.start\.at: 'first' is not one of start, end"),
        (
            "role: a}\n      compare",
            "role: a, color: red}\n      compare",
            r"\(a_rises\)\.quantities\.end: unknown key 'color'; valid keys: stat, role",
        ),
        (
            "compare: raises",
            "compare: rises",
            r"\(a_rises\)\.compare\.kind: 'rises' is not a comparison; valid: lowers, raises",
        ),
        (
            "compare: raises",
            "compare: {kind: raises, end: finish}",
            r"\(a_rises\)\.compare\.end: 'finish' is not a quantity of this claim",
        ),
        (
            "→ end {end:2}",
            "→ end {ending}",
            r"\(a_rises\)\.evidence: \{ending\} names nothing this text can read",
        ),
        ("rule: rise", "rule: fall", r"\(a_rises\)\.rule: 'fall' is not one of the file's rules \(rise\)"),
        ("      rule: rise\n", "", r"\(a_rises\): quotes a sentence, so it needs a rule"),
        (
            "why: runs",
            "why: ran",
            r"\(a_rises\)\.missing\[0\]\.why: 'ran' is not a reason; valid: runs, steps, unevaluated",
        ),
        ("params: {band: 0.25}", "params: {window: 0.25}", r"params\.window: is set by the study config"),
        ("band {band:.0%}", "band {bandwidth}", r"\(a_rises\)\.statement: \{bandwidth\} names nothing"),
        (
            "      statement: A raises entropy (band {band:.0%})\n",
            "",
            r"\(a_rises\)\.statement: expected a non-empty string, got None",
        ),
        (
            "end: {stat: window, at: end, metric: entropy/rollout, role: a}",
            "end: {stat: deviation, of: ratio}\n        ratio: {stat: deviation, of: end}",
            r"\(a_rises\)\.quantities\.end: refers to itself: end -> ratio -> end",
        ),
        (
            "title: A study\n",
            "title: A study\nmarkdown: [{rules: paper}]\n",
            r"markdown\[0\]: rules: no group 'paper'; groups: claims",
        ),
        ("title: A study\n", "titel: A study\n", r"unknown key 'titel'; valid keys: title, names"),
    ],
)
def test_a_bad_claims_file_is_an_error_naming_the_file_the_claim_and_the_field(tmp_path, old, new, message):
    assert old in RISE
    path = _file(tmp_path, RISE.replace(old, new, 1))
    with pytest.raises(ClaimsError, match=re.escape(str(path)) + ": .*" + message):
        load_claims(path)


def test_unreadable_and_unresolvable_claims_files(tmp_path):
    bad = _file(tmp_path, "title: [unclosed\n")
    with pytest.raises(ClaimsError, match=re.escape(str(bad)) + ": not valid YAML"):
        load_claims(bad)
    with pytest.raises(ClaimsError, match="cannot be read"):
        load_claims(tmp_path / "missing.claims.yaml")
    assert resolve_claims("paper") == PACKAGED / "paper.claims.yaml"
    _file(tmp_path, RISE, "mine.claims.yaml")
    assert resolve_claims("mine.claims.yaml", tmp_path / "study.yaml") == tmp_path / "mine.claims.yaml"
    with pytest.raises(
        ClaimsError, match=r"study.yaml: study.claims: 'papers' is neither .*\(.*paper, study_cpu_controls"
    ):
        resolve_claims("papers", tmp_path / "study.yaml")


# --------------------------------------------------------------------------------------------
# The committed claims files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    sorted(p.name for p in (ROOT / "configs").glob("study*.yaml") if not p.name.endswith(".claims.yaml")),
)
def test_every_study_config_names_a_claims_file_that_loads(config):
    settings, _ = read_study_config(ROOT / "configs" / config)
    claims = study_claims(settings, ROOT / "configs" / config)
    expected = {
        "paper.claims.yaml": 8,
        "study_cpu_controls.claims.yaml": 15,
        "study_cpu_stop.claims.yaml": 16,
    }
    assert len(claims.groups["claims"]) == expected[claims.path.name]


def test_the_packaged_claims_files_hold_the_papers_and_the_studies_claims():
    paper = load_claims(PACKAGED / "paper.claims.yaml")
    assert [c.id for c in paper.groups["claims"]] == [
        "psr_lowers_entropy",
        "psr_shortens_answers",
        "nsr_raises_entropy",
        "eapo_holds_entropy",
        "eapo_best_avg",
        "grpo_lowers_entropy",
        "nsr_lengthens_answers",
        "nsr_reward_rises_faster",
    ]
    assert len(paper.groups["paper_claims"]) == 12 and paper.params["margin"] == 0.012
    assert all(
        c.quote for c in paper.groups["paper_claims"]
    )  # each quotes the paper (or says it goes beyond)
    controls = load_claims(PACKAGED / "study_cpu_controls.claims.yaml")
    stop = load_claims(PACKAGED / "study_cpu_stop.claims.yaml")
    # the stop study repeats the controls study's rows under the same keys (plan.md's claim 9)
    assert {c.id for c in controls.groups["claims"]} < {c.id for c in stop.groups["claims"]}
    assert {c.id for c in stop.groups["claims"]} - {c.id for c in controls.groups["claims"]} == {
        "nsr_above_psr"
    }
    assert list(stop.rules) == [str(n) for n in range(1, 9)]
    raw = yaml.safe_load((PACKAGED / "study_cpu_stop.claims.yaml").read_text(encoding="utf-8"))
    plan = re.sub(r"\s+", " ", (ROOT / "docs/results/study-cpu-stop/plan.md").read_text(encoding="utf-8"))
    for number, rule in raw["rules"].items():
        assert rule in plan, number  # quoted from plan.md, word for word


def test_the_docs_claims_table_lists_every_registry_entry_with_its_help():
    """docs/guide/evaluation.md's {eapo-claims-registry} is generated from the registries, so a new entry
    is documented by registering it."""
    import importlib.util

    from eapo.study import BLOCKS, REASONS, STATISTICS

    spec = importlib.util.spec_from_file_location("eapo_docs", ROOT / "docs" / "_ext" / "eapo_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.claims_registry_rows()
    assert [(key, name) for key, name, _, _ in rows] == [
        *(("stat", n) for n in STATISTICS),
        *(("compare", n) for n in COMPARISONS),
        *(("missing.why", n) for n in REASONS),
        *(("markdown", n) for n in BLOCKS),
    ]
    assert all(what and "``" not in what and ":func:" not in what for *_, what in rows)
    assert ("compare", "inside", "value, band") == rows[[r[1] for r in rows].index("inside")][:3]
    text = (ROOT / "docs" / "guide" / "evaluation.md").read_text(encoding="utf-8")
    assert "```{eapo-claims-registry}" in text


def test_claims_only_and_report_only_together_are_refused(tmp_path):
    from typer.testing import CliRunner

    from eapo.cli import app

    config = ROOT / "configs" / "study_cpu_controls.yaml"
    args = ["study", "--config", str(config), "--output-dir", str(tmp_path), "--claims-only", "--report-only"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "--claims-only and --report-only: give one" in result.output
    result = CliRunner().invoke(app, args[:-1])
    assert result.exit_code == 2 and "holds no claims.json and claims.md to rewrite" in result.output


def test_a_claims_file_defaults_its_thresholds_and_names_its_plot_bands(tmp_path):
    """A claims file's params may give entropy_band / max_clipped_share (the study config's value wins;
    one that it names and neither sets is refused), and plot.bands names the lines of dynamics.png."""
    from eapo.study import StudySettings, claims_params
    from eapo.study.run import plot_bands
    from eapo.sweep import SweepError

    paper = load_claims(PACKAGED / "paper.claims.yaml")
    settings = StudySettings(claims="paper", methods=["grpo"])
    params = claims_params(settings, paper)
    assert (params["entropy_band"], params["max_clipped_share"]) == (0.1, 0.1)
    assert plot_bands(paper, params) == {"entropy/rollout_over_h0": (0.9, 1.1)}
    wider = claims_params(StudySettings(claims="paper", methods=["grpo"], entropy_band=0.2), paper)
    assert wider["entropy_band"] == 0.2
    assert plot_bands(paper, wider)["entropy/rollout_over_h0"] == pytest.approx((0.8, 1.2))
    assert "{entropy_band" in paper.rules["eapo_stable_entropy"] and "entropy_band" in paper.study_params
    # a file that names entropy_band without a default: the study config must set it
    text = RISE.replace("statement: A raises entropy (band {band:.0%})", "statement: A (band {entropy_band})")
    bare = load_claims(_file(tmp_path, text))
    with pytest.raises(SweepError, match=r"names entropy_band, which neither the study config"):
        claims_params(settings, bare)
    assert (
        claims_params(StudySettings(claims="x", methods=["grpo"], entropy_band=0.3), bare)["entropy_band"]
        == 0.3
    )
    assert plot_bands(bare, params) == {}
    with pytest.raises(ClaimsError, match=r"plot\.bands\.r: 'nope' is not a parameter"):
        load_claims(_file(tmp_path, RISE + "plot: {bands: {r: [1 - nope]}}\n", "y.claims.yaml"))
