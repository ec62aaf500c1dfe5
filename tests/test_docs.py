"""The README is a landing page whose links resolve and whose quick starts run; the docs' configuration
reference covers every key. (``make docs`` builds the site with warnings as errors: broken links inside
docs/ fail there; the verl quick start is composed with verl's config in tests/engines/verl.)

A quick start is a fenced block after a ``<!-- docs-test: NAME -->`` marker; the same block may appear
on several pages (README.md and a docs page) and must then be identical.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: A study's per-run outputs (runs/, base/, logs/ under docs/results/STUDY/) are data, not pages (docs/conf.py).
_DATA = ("runs", "base", "logs")
PAGES = [
    README,
    *sorted(
        p
        for p in (ROOT / "docs").rglob("*.md")
        if "_build" not in p.parts
        and not (p.relative_to(ROOT / "docs").parts[:1] == ("results",) and set(p.parts) & set(_DATA))
    ),
]


def marked_blocks(name: str) -> dict[Path, str]:
    """Every page's block marked ``<!-- docs-test: name -->``: page -> the block's code."""
    marker = f"<!-- docs-test: {name} -->"
    found = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        if marker in text:
            match = re.match(r"\s*```\w+\n(.*?)```", text[text.index(marker) + len(marker) :], flags=re.S)
            assert match, f"{page}: {marker} is not followed by a fenced code block"
            found[page] = match.group(1)
    return found


def the_block(name: str, *, on: tuple[str, ...]) -> str:
    blocks = marked_blocks(name)
    assert {str(page.relative_to(ROOT)) for page in blocks} >= set(on), f"{name} missing from {on}"
    assert len(set(blocks.values())) == 1, f"the {name} blocks differ between {sorted(map(str, blocks))}"
    return next(iter(blocks.values()))


def replace_once(code: str, old: str, new: str) -> str:
    assert code.count(old) == 1, f"the quick start no longer contains {old!r} exactly once"
    return code.replace(old, new)


# --- the README ---------------------------------------------------------------------------------------------


def test_readme_is_a_landing_page_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, (
        "the README is the front door: keep it to ~200 lines, the rest in docs/"
    )
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    assert [line.split()[:2] for line in first_block.splitlines()] == [["make", "demo"], ["make", "test"]]
    for section in (
        "Quick start: a TRL script",
        "Quick start: the command line",
        "Quick start: verl",
        "Results",
    ):
        assert f"## {section}" in text
    # the weighting table, as eapo.core defines the schemes
    from eapo.core import make_weighting

    for method, w_pos, w_neg in [("grpo", 1, 1), ("psr", 1, 0), ("nsr", 0, 1), ("w_reinforce", 0.1, 1)]:
        assert re.search(rf"\| `{method}`\s+\| {w_pos}\s+\| {w_neg}\s+\|", text), method
        assert make_weighting(method).weights(1.0) == (w_pos, w_neg)
    assert "clip(0.2 · H_t/H_0, 0, 2)" in text and make_weighting("eapo").weights(1.0) == (0.2, 1.0)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    """Every relative link of every page (README.md and docs/) names a file or directory that exists, and a
    ``#anchor`` into a Markdown page names one of its headings (GitHub's slugs)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    broken = []
    for link in links:
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve()
        if not path.exists():
            broken.append(link)
        elif anchor and path.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
            if anchor not in slugs:
                broken.append(link)
    assert not broken, f"{page.name}: broken links {broken}"


# --- the quick starts run -------------------------------------------------------------------------------


def test_trl_quickstart_trains_the_papers_objective_on_the_tiny_model(tmp_path):
    """README's and docs/guide/trl.md's TRL script, with the tiny random model, 2 steps, short answers
    and CPU settings substituted: it trains the paper's objective with EAPO's weights."""
    from eapo.core import EntropyAdaptiveWeighting
    from eapo.runtime.models import resolve_model

    code = the_block("trl-quickstart", on=("README.md", "docs/guide/trl.md"))
    code = replace_once(code, '"HuggingFaceTB/SmolLM2-135M-Instruct"', repr(resolve_model("tiny")))
    code = replace_once(code, 'output_dir="runs/trl-eapo"', f"output_dir={str(tmp_path / 'out')!r}")
    code = replace_once(
        code,
        "max_steps=100,",
        "max_steps=2, use_cpu=True, bf16=False, max_completion_length=8, report_to='none', "
        "save_strategy='no', gradient_checkpointing=False, logging_steps=1,",
    )
    namespace: dict = {}
    exec(compile(code, "trl-quickstart", "exec"), namespace)  # noqa: S102 - our own documentation
    trainer = namespace["trainer"]
    assert (trainer.loss_type, trainer.beta, trainer.args.use_bias_correction_kl) == ("grpo", 0.001, False)
    assert (trainer.epsilon_low, trainer.epsilon_high, trainer.num_generations) == (0.2, 0.2, 4)
    assert trainer.scale_rewards == "group" and isinstance(trainer.weighting, EntropyAdaptiveWeighting)
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2 and logs[0]["eapo/w_pos"] == pytest.approx(0.2, rel=1e-6)
    h0 = logs[0]["entropy/rollout"]
    assert logs[1]["eapo/w_pos"] == pytest.approx(0.2 * logs[1]["entropy/rollout"] / h0, rel=1e-5)


def test_cli_quickstart_runs_as_written(tmp_path):
    """README's and docs/getting-started.md's command lines, run one by one in an empty directory."""
    from eapo.run_dir import read_metrics

    code = the_block("cli-quickstart", on=("README.md", "docs/getting-started.md"))
    commands = [line.split("#")[0].strip() for line in code.splitlines() if line.split("#")[0].strip()]
    assert all(command.startswith("eapo ") for command in commands)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    outputs = []
    for command in commands:
        out = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )
        assert out.returncode == 0, f"{command}\n{out.stderr[-3000:]}"
        outputs.append(out.stdout)
    tiny, psr = read_metrics(tmp_path / "runs" / "tiny"), read_metrics(tmp_path / "runs" / "tiny-psr")
    assert [row["step"] for row in tiny] == [1, 2, 3] and [row["step"] for row in psr] == [1, 2]
    assert tiny[0]["eapo/w_pos"] == pytest.approx(0.2) and {
        (r["eapo/w_pos"], r["eapo/w_neg"]) for r in psr
    } == {(1.0, 0.0)}
    assert (tmp_path / "runs" / "dynamics.png").stat().st_size > 0
    rows = [line.split() for line in outputs[-1].splitlines() if re.match(r"^\s*\d+\s", line)]
    assert [(float(r[2]), float(r[3])) for r in rows] == [(0.2, 1.0), (0.1667, 1.0), (0.1333, 1.0)]


# --- the generated configuration reference ---------------------------------------------------------------


def _docs_extension():
    spec = importlib.util.spec_from_file_location("eapo_docs", ROOT / "docs" / "_ext" / "eapo_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_reference_has_every_key_with_its_help():
    from eapo.config import RunConfig

    def leaves(cls, prefix=""):
        for f in dataclasses.fields(cls):
            tp = cls.__dataclass_fields__[f.name].type
            nested = (
                dataclasses.is_dataclass(f.default_factory)
                if f.default_factory is not dataclasses.MISSING
                else False
            )
            if nested:
                yield from leaves(f.default_factory, f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}", f.metadata.get("help"), tp

    expected = {key: help_text for key, help_text, _ in leaves(RunConfig)}
    sections = _docs_extension().config_sections()
    rows = {
        key: (type_, default, help_text)
        for section in sections.values()
        for key, type_, default, help_text in section
    }
    assert rows.keys() == expected.keys()
    assert all(rows[key][2] == expected[key] and expected[key] for key in expected), (
        "a field without help text"
    )
    assert rows["algorithm.beta"][:2] == ("float", "0.001")
    assert rows["logging.report_to"][:2] == ("list[str]", "[tensorboard]")
    assert rows["model.lora.layers"][0] == "int | list[int] | None"
    # every section is on the configuration page (make docs also fails on a missing one)
    page = (ROOT / "docs" / "guide" / "configuration.md").read_text(encoding="utf-8")
    assert set(re.findall(r"```\{eapo-config-section\} (\S+)", page)) == set(sections)


def test_trl_config_reference_lists_eapo_configs_own_fields():
    rows = {row[0]: row for row in _docs_extension().trl_config_rows()}
    assert rows["loss_type"][2:4] == ("grpo", "dapo")
    assert rows["beta"][2:4] == ("0.001", "0.0")
    assert rows["use_bias_correction_kl"][2:4] == ("false", "true")
    assert rows["method"][2:4] == ("eapo", "")
    assert {
        "w0",
        "w_min",
        "w_max",
        "w_pos",
        "w_neg",
        "anchor_steps",
        "split_by",
        "entropy_agg",
    } <= rows.keys()
    assert all(row[4] for row in rows.values())


def test_entropy_control_presets_table_lists_the_registry():
    from eapo.core import ENTROPY_CONTROLS

    rows = _docs_extension().entropy_control_rows()
    assert [row[0] for row in rows] == list(ENTROPY_CONTROLS)
    assert all(row[1] and row[3] for row in rows)
    assert dict((row[0], row[2]) for row in rows)["clip_higher"] == "epsilon_high=0.28"
    page = (ROOT / "docs" / "guide" / "entropy-controls.md").read_text(encoding="utf-8")
    assert "```{eapo-entropy-controls}" in page


def test_reward_component_and_eval_column_tables_list_the_registry():
    from eapo.rewards import REWARD_COMPONENTS
    from eapo.rewards.registry import eval_columns

    extension = _docs_extension()
    rows = {row[0]: row for row in extension.reward_component_rows()}
    assert list(rows) == list(REWARD_COMPONENTS)
    assert all(row[1] for row in rows.values())
    assert rows["llm_judge"][2:5] == ("0.3", "laaj", "laaj")
    assert rows["rouge_l"][3:5] == ("rouge_l (default)", "rouge_l, rl_at_k")
    assert rows["format"][4] == "beside the table (extra)" and rows["overlong"][2] == ""
    assert (
        rows["rouge_l"][6] == "--rouge-level (level)"
        and rows["reranker"][6] == "--reranker-backend (backend)"
    )
    assert rows["format"][6] == ""
    columns = extension.eval_column_rows()
    assert [row[0] for row in columns] == [column.key for _, column in eval_columns()]
    assert columns[2] == ("rl_at_k", "RL@{k}", "rouge_l", "best of the k samples", "avg", "rl_at_k_strict")
    assert "```{eapo-reward-components}" in (ROOT / "docs" / "guide" / "rewards.md").read_text(
        encoding="utf-8"
    )
    assert "```{eapo-eval-columns}" in (ROOT / "docs" / "guide" / "evaluation.md").read_text(encoding="utf-8")
