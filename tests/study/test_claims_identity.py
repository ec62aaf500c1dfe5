"""The committed studies' claims, judged again by the claims engine from their committed runs, come out byte
for byte as committed (issue 48, item 4): ``claims.json`` and ``claims.md`` of every study under
docs/results that has them, rebuilt by ``eapo study --claims-only`` (nothing trained or evaluated)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eapo.study import rejudge_study
from eapo.sweep import SweepError

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"

#: Every committed study with a claims.json: its directory and the config it ran (its claims.json's "config").
COMMITTED = {
    "study-cpu-smollm2-medquad": "configs/study_cpu.yaml",
    "study-cpu-smollm2-medquad-3seeds": "configs/study_cpu_3seeds.yaml",
    "study-cpu-controls": "configs/study_cpu_controls.yaml",
    "study-cpu-stop": "configs/study_cpu_stop.yaml",
}
#: claims.json's keys that record the invocation that ran the study (kept by --claims-only).
RECORD = ("config", "settings", "wall_time_s", "backends", "report_only", "incomplete")


def test_every_committed_claims_json_is_rebuilt_here():
    """A study committed with a claims.json later is rebuilt by the test below too (it must be listed)."""
    found = {path.parent.name for path in RESULTS.glob("*/claims.json")}
    assert found == set(COMMITTED)
    for study, config in COMMITTED.items():
        assert json.loads((RESULTS / study / "claims.json").read_text(encoding="utf-8"))["config"] == config


def _blank_copy(study: str, out: Path) -> tuple[bytes, bytes]:
    """``out``: the study's runs (linked) and its claims.json / claims.md stripped to the run record (the
    record's keys; the title and context lines), so that everything else must be computed again."""
    results = RESULTS / study
    out.mkdir(parents=True)
    (out / "runs").symlink_to(results / "runs")
    committed_json = (results / "claims.json").read_bytes()
    committed_md = (results / "claims.md").read_bytes()
    payload = json.loads(committed_json)
    (out / "claims.json").write_text(json.dumps({k: payload[k] for k in RECORD if k in payload}))
    head = committed_md.decode("utf-8").split("\n\n")[:2]  # the title, the context lines
    (out / "claims.md").write_text("\n\n".join(head) + "\n\nnothing else\n", encoding="utf-8")
    return committed_json, committed_md


@pytest.mark.parametrize("study", sorted(COMMITTED))
def test_a_committed_study_rebuilds_its_claims_byte_for_byte(tmp_path, study):
    """``eapo study --config CONFIG --output-dir COPY --claims-only`` on a copy whose claims are blanked."""
    results = RESULTS / study
    if not (results / "runs").is_dir():
        pytest.skip(
            f"{results} has no runs/ committed (only its claims, tables and figure), so its claims cannot be "
            "judged again from its runs"
        )
    out = tmp_path / study
    committed_json, committed_md = _blank_copy(study, out)
    from eapo.cli import app

    result = CliRunner().invoke(
        app, ["study", "--config", str(ROOT / COMMITTED[study]), "--output-dir", str(out), "--claims-only"]
    )
    assert result.exit_code == 0, result.output
    assert (out / "claims.json").read_bytes() == committed_json
    assert (out / "claims.md").read_bytes() == committed_md
    assert sorted(p.name for p in out.iterdir()) == ["claims.json", "claims.md", "runs"]  # nothing else


def test_claims_only_refuses_a_study_whose_runs_changed_or_that_has_no_claims(tmp_path):
    """The run record is kept only while it describes the runs: a configuration complete now that the
    record called incomplete (or none recorded at all) is refused, naming both."""
    study = "study-cpu-controls"
    if not (RESULTS / study / "runs").is_dir():
        pytest.skip(f"{RESULTS / study} has no runs/ committed")
    out = tmp_path / study
    _blank_copy(study, out)
    payload = json.loads((out / "claims.json").read_text())
    payload["incomplete"] = {"grpo": {"label": "GRPO", "finished": 2, "planned": 3}}
    (out / "claims.json").write_text(json.dumps(payload))
    config = ROOT / COMMITTED[study]
    with pytest.raises(SweepError, match=r"changed since .*not complete then: grpo; now: none"):
        rejudge_study(config, out, echo=lambda m: None)
    shutil.rmtree(out)
    out.mkdir()
    with pytest.raises(SweepError, match="holds no claims.json and claims.md to rewrite"):
        rejudge_study(config, out, echo=lambda m: None)
