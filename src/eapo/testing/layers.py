"""The package's layers, read from its imports: which layer imports which, and any import that runs
back up the pipeline or closes a cycle. ``tests/test_layout.py`` asserts there is none;
``python -m eapo.testing.layers [SRC]`` prints the layer-to-layer imports of a checkout's ``src``
(this one by default), e.g. of an older commit's worktree to compare layouts.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

#: The pipeline, bottom to top. A module may import its own layer's modules and any layer below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("eapo.core",),
    ("eapo.data", "eapo.rewards", "eapo.run_dir"),
    ("eapo.config",),
    ("eapo.runtime",),
    ("eapo.engines",),
    ("eapo.evaluation",),
    ("eapo.train", "eapo.plot", "eapo.summary", "eapo.sweep", "eapo.study"),
    ("eapo.commands", "eapo.cli", "eapo.demo"),
)
#: Neither engine imports the other.
SIDE_BY_SIDE = ("eapo.engines.trl", "eapo.engines.verl")
#: Outside the pipeline: the package root (a lazy facade over the TRL engine), the plugin loader it runs
#: (:mod:`eapo.plugins`, which imports no eapo module) and the test helpers.
APART = ("eapo", "eapo.plugins", "eapo.testing")

DEFAULT_SRC = Path(__file__).resolve().parents[2]


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(src: Path = DEFAULT_SRC) -> Iterator[tuple[str, str, int]]:
    """``(importer, imported, line)`` for every ``eapo`` import, at module level or inside a function
    (``from eapo.engines.trl import args`` counts as importing the module ``eapo.engines.trl.args``)."""
    for path in sorted((src / "eapo").rglob("*.py")):
        importer = module_name(path, src)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").startswith("eapo")
            ):
                yield importer, node.module, node.lineno
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if (src / (full.replace(".", "/") + ".py")).exists():
                        yield importer, full, node.lineno
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("eapo"):
                        yield importer, alias.name, node.lineno


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int | None:
    """The index of ``module``'s layer in :data:`LAYERS`; ``None`` for :data:`APART`. A module in no
    layer raises: a new top-level module must be placed."""
    if module in APART or within(module, "eapo.testing"):
        return None
    for index, layer in enumerate(LAYERS):
        if any(within(module, prefix) for prefix in layer):
            return index
    raise ValueError(f"{module} is in no layer of eapo.testing.layers.LAYERS: place it there")


def group_of(module: str) -> str:
    """The unit a picture of the layers shows: a top-level module or package, an engine."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["engines"] and len(parts) > 2 else parts[:2])


def upward_imports(src: Path = DEFAULT_SRC) -> list[str]:
    found = []
    for importer, imported, line in imports(src):
        low, high = layer_of(importer), layer_of(imported)
        if low is not None and high is not None and high > low:
            found.append(f"{importer}:{line} imports {imported} (layer {high} above {low})")
    return found


def engine_crossings(src: Path = DEFAULT_SRC) -> list[str]:
    a, b = SIDE_BY_SIDE
    return [
        f"{importer}:{line} imports {imported}"
        for importer, imported, line in imports(src)
        if (within(importer, a) and within(imported, b)) or (within(importer, b) and within(imported, a))
    ]


def cycles(src: Path = DEFAULT_SRC) -> list[str]:
    """Import cycles between modules (a package's ``__init__`` importing its own submodules is not one)."""
    graph: dict[str, set[str]] = {}
    for importer, imported, _ in imports(src):
        if importer != imported and importer != "eapo" and not within(importer, "eapo.testing"):
            if not within(imported, importer):
                graph.setdefault(importer, set()).add(imported)
    state: dict[str, int] = {}
    found: list[str] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    src = Path(args[0]) if args else DEFAULT_SRC
    edges = sorted(
        {(group_of(a), group_of(b)) for a, b, _ in imports(src) if group_of(a) != group_of(b) and a != "eapo"}
    )
    for a, b in edges:
        print(f"{a} -> {b}")
    try:
        problems = upward_imports(src) + engine_crossings(src) + [f"cycle: {c}" for c in cycles(src)]
    except ValueError as error:  # an older layout has modules this one does not place
        problems = [str(error)]
    print(f"\n{len(edges)} imports between units; problems: {len(problems)}")
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
