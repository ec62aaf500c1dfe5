"""The package's layers, read from its imports (issue 27): every import runs down the pipeline, the two
engines sit side by side, and the paths that moved name their new home."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: The pipeline, bottom to top. A module may import its own layer's modules and any layer below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("eapo.core",),
    ("eapo.data", "eapo.rewards", "eapo.run_dir"),
    ("eapo.config",),
    ("eapo.runtime",),
    ("eapo.engines", "eapo.integrations"),
    ("eapo.evaluation",),
    (
        "eapo.train",
        "eapo.plot",
        "eapo.summary",
        "eapo.sweep",
        "eapo.study",
        "eapo.study_paper",
        "eapo.study_power",
    ),
    ("eapo.commands", "eapo.cli", "eapo.demo"),
)
#: Neither engine imports the other.
SIDE_BY_SIDE = ("eapo.engines.trl", "eapo.engines.verl")
#: Outside the pipeline: the package root (a lazy facade over the TRL engine, the moved-path hook) and
#: the test helpers.
APART = ("eapo", "eapo._moved", "eapo.testing")


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every ``eapo`` import, at module level or inside a function."""
    found = []
    for path in sorted((SRC / "eapo").rglob("*.py")):
        importer = _module(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").startswith("eapo")
            ):
                found.append((importer, node.module, node.lineno))
                for alias in node.names:  # `from eapo.engines.trl import args` imports a module
                    full = f"{node.module}.{alias.name}"
                    if (SRC / (full.replace(".", "/") + ".py")).exists():
                        found.append((importer, full, node.lineno))
            elif isinstance(node, ast.Import):
                found += [(importer, a.name, node.lineno) for a in node.names if a.name.startswith("eapo")]
    return found


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _layer(module: str) -> int | None:
    if any(module == name or (name == "eapo.testing" and _within(module, name)) for name in APART):
        return None
    for index, layer in enumerate(LAYERS):
        if any(_within(module, prefix) for prefix in layer):
            return index
    raise AssertionError(f"{module} is in no layer of tests/test_layout.py: place it in LAYERS")


def test_every_import_runs_down_the_pipeline():
    upward = []
    for importer, imported, line in _imports():
        low, high = _layer(importer), _layer(imported)
        if low is None or high is None:
            continue
        if high > low:
            upward.append(f"{importer}:{line} imports {imported} (layer {high} above {low})")
    assert upward == []


def test_the_engines_sit_side_by_side():
    crossing = [
        f"{importer}:{line} imports {imported}"
        for importer, imported, line in _imports()
        for a, b in (SIDE_BY_SIDE, SIDE_BY_SIDE[::-1])
        if _within(importer, a) and _within(imported, b)
    ]
    assert crossing == []


def test_no_import_cycle_between_modules():
    graph: dict[str, set[str]] = {}
    for importer, imported, _ in _imports():
        if importer != imported and not _within(importer, "eapo.testing") and importer != "eapo":
            graph.setdefault(importer, set()).add(imported)
    # a package's __init__ re-exporting its submodules is not a cycle of its own: drop parent -> child
    graph = {a: {b for b in bs if not _within(b, a)} for a, bs in graph.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


@pytest.mark.parametrize("old", sorted(importlib.import_module("eapo._moved").MOVED_MODULES))
def test_a_moved_module_names_its_new_path(old):
    from eapo._moved import MOVED_MODULES

    if old.startswith("eapo.integrations.verl."):
        pytest.importorskip("verl")  # the old parent is the plugin itself, which needs verl
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(old)
    assert str(raised.value) == f"{old} moved to {MOVED_MODULES[old]}: import it from there"
    new = MOVED_MODULES[old].split(" ")[0]
    assert (SRC / (new.replace(".", "/") + ".py")).exists(), new  # the new path exists


def test_the_backend_names_of_old_eapo_engines_name_their_new_module():
    with pytest.raises(
        ImportError, match=r"eapo.engines.plan_rollout moved to eapo.runtime.backends.plan_rollout"
    ):
        from eapo.engines import plan_rollout  # noqa: F401
    from eapo.runtime.backends import plan_rollout  # noqa: F401  (there it is)


def test_the_lm_head_kernel_names_its_new_module():
    import eapo.core

    with pytest.raises(ImportError, match=r"eapo.engines.trl.lm_head.token_logprobs_and_entropy"):
        eapo.core.token_logprobs_and_entropy  # noqa: B018


def test_the_old_verl_plugin_path_is_the_plugin():
    """``pkg://eapo.integrations.verl`` in users' verl configs keeps loading the reward function."""
    pytest.importorskip("verl")
    import eapo.engines.verl
    import eapo.integrations.verl

    assert eapo.integrations.verl.compute_score is eapo.engines.verl.compute_score
