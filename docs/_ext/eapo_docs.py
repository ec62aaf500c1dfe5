"""Sphinx directives that generate eapo's configuration reference from the code, so it cannot drift.

``{eapo-config-section} SECTION`` renders one section of the ``eapo train`` tree
(:class:`eapo.config.RunConfig`, e.g. ``model`` or ``reward.judge``) as a table of key, type, default
and the field's own help string (``dataclasses.field(metadata={"help": ...})``). Every section of the
tree must be rendered somewhere: a section the pages leave out is a warning, which ``make docs``
(``-W``) turns into an error, so a new section cannot go undocumented.

``{eapo-entropy-controls}`` renders the entropy-control presets registered in
:data:`eapo.core.ENTROPY_CONTROLS` (name, source, settings, what each does).

``{eapo-reward-components}`` renders the reward components registered in
:data:`eapo.rewards.REWARD_COMPONENTS` (name, what it scores, default weight, evaluation scorer and
columns, plot panels), and ``{eapo-eval-columns}`` the evaluation columns they declare (key, title, how a
prompt's samples make it, the Avgs it joins, its strict variant).

``{eapo-claims-registry}`` renders what a study's claims file can use, from :mod:`eapo.study`'s registries:
its statistics (``stat:``), comparisons (``compare:``), reasons (``missing: {why: ...}``) and claims.md
blocks (``markdown:``), each with its options and its help.

``{eapo-trl-config}`` renders the fields :class:`eapo.engines.trl.config.EAPOConfig` defines on top of TRL's
``GRPOConfig``: its default, TRL's default where it overrides one, and the help string.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


# --- the rows, as plain data (tests/test_docs.py reads them too) ------------------------------------------


def type_name(tp: Any) -> str:
    """``str | None``, ``dict[str, float]``, ``int``: an annotation as a reader writes it."""
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, __import__("types").UnionType):
        return " | ".join("None" if a is type(None) else type_name(a) for a in args)
    if origin is not None and args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in args)}]"
    return str(tp).replace("typing.", "")


def yaml_value(value: Any) -> str:
    """A default as it would be written in a config file (YAML flow style)."""
    import yaml

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if value == "" else value
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


#: The name of the tree's own leaves (``engine``) in :func:`config_sections`.
TOP_LEVEL = "top-level"


def config_sections() -> dict[str, list[tuple[str, str, str, str]]]:
    """Every section of the ``eapo train`` tree (``model``, ``model.lora``, ...) -> its leaf fields as
    ``(dotted key, type, default, help)``, in declaration order; the tree's own leaves (``engine``) are
    the section :data:`TOP_LEVEL`."""
    from eapo.config import RunConfig

    sections: dict[str, list[tuple[str, str, str, str]]] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        rows = sections.setdefault(prefix or TOP_LEVEL, [])
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            key = f"{prefix}.{f.name}" if prefix else f.name
            if isinstance(tp, type) and dataclasses.is_dataclass(tp):
                walk(tp, key)
            else:
                rows.append((key, type_name(tp), yaml_value(field_default(f)), f.metadata.get("help", "")))

    walk(RunConfig, "")
    return sections


def trl_config_rows() -> list[tuple[str, str, str, str, str]]:
    """The fields :class:`eapo.engines.trl.config.EAPOConfig` declares itself: ``(name, type, default, TRL's
    default or "", help)``."""
    from trl import GRPOConfig

    from eapo.engines.trl.config import EAPOConfig

    trl_fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    hints = typing.get_type_hints(EAPOConfig)
    own = EAPOConfig.__dict__.get("__annotations__", {})
    rows = []
    for f in dataclasses.fields(EAPOConfig):
        if f.name not in own:
            continue
        trl_default = yaml_value(field_default(trl_fields[f.name])) if f.name in trl_fields else ""
        rows.append(
            (
                f.name,
                type_name(hints[f.name]),
                yaml_value(field_default(f)),
                trl_default,
                f.metadata.get("help", ""),
            )
        )
    return rows


def entropy_control_rows() -> list[tuple[str, str, str, str]]:
    """The entropy-control presets of :data:`eapo.core.ENTROPY_CONTROLS`: ``(method, source, the
    ``algorithm.*`` settings it sets, what it does)``, in registration order."""
    from eapo.core import ENTROPY_CONTROLS

    return [
        (
            control.name,
            control.source,
            ", ".join(f"{key}={yaml_value(value)}" for key, value in control.preset.items()),
            control.help,
        )
        for control in ENTROPY_CONTROLS.values()
    ]


def reward_component_rows() -> list[tuple[str, str, str, str, str, str, str]]:
    """The reward components of :data:`eapo.rewards.REWARD_COMPONENTS`: ``(name, what it scores, default
    weight or "", evaluation scorer, its columns, plot panels, the flags of its scorer settings and the
    options they set)``, in registration order."""
    from eapo.rewards import REWARD_COMPONENTS

    rows = []
    for component in REWARD_COMPONENTS.values():
        scorer = component.evaluation
        if scorer is None:
            evaluated, columns, flags = "", "", ""
        else:
            flags = ", ".join(f"{setting.flag} ({setting.option})" for setting in scorer.settings)
            evaluated = component.scorer_name or ""
            evaluated += " (default)" if scorer.default else ""
            columns = ", ".join(column.key for column in scorer.columns) or "beside the table (extra)"
        rows.append(
            (
                component.name,
                component.help,
                yaml_value(component.default_weight) if component.default_weight else "",
                evaluated,
                columns,
                ", ".join(key for key, _ in component.plot_panels),
                flags,
            )
        )
    return rows


def eval_column_rows() -> list[tuple[str, str, str, str, str, str]]:
    """The evaluation columns the components declare, in column order: ``(key, title, scorer, per prompt,
    the Avgs it joins, its strict variant or "")``."""
    from eapo.rewards.registry import eval_columns

    return [
        (
            column.key,
            column.title,
            scorer,
            "mean of the k samples" if column.per_prompt == "mean" else "best of the k samples",
            ", ".join(column.averages),
            f"{column.key}_strict" if column.strict else "",
        )
        for scorer, column in eval_columns()
    ]


def weighting_scheme_rows() -> list[tuple[str, str, str, str, str]]:
    """The weighting schemes of :data:`eapo.core.WEIGHTING_SCHEMES`: ``(method, label, its weights with their
    defaults, verl's estimator, what it does)``, in registration order."""
    from eapo.core import WEIGHTING_SCHEMES

    return [
        (
            name,
            scheme.label,
            ", ".join(f"{key}={yaml_value(value)}" for key, value in scheme.defaults.items()),
            scheme.verl_estimator,
            scheme.help,
        )
        for name, scheme in WEIGHTING_SCHEMES.items()
    ]


def claims_registry_rows() -> list[tuple[str, str, str, str]]:
    """Every entry of the claims engine's registries: ``(where it is named in a claims file, name, its
    options, what it does)``, in registration order."""
    import re

    from eapo.study import BLOCKS, COMPARISONS, REASONS, STATISTICS

    def plain(text: str) -> str:  # the docstring's reST roles and literals as plain text
        return re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "")

    rows = [
        ("stat", s.name, ", ".join([*s.required, *(f"[{o}]" for o in s.optional)]), plain(s.help))
        for s in STATISTICS.values()
    ]
    rows += [
        ("compare", c.name, ", ".join([*c.quantities, *c.numbers]), plain(c.help))
        for c in COMPARISONS.values()
    ]
    rows += [("missing.why", r.name, ", ".join(r.options), plain(r.help)) for r in REASONS.values()]
    rows += [("markdown", b.name, ", ".join(b.keys[1:]), plain(b.help)) for b in BLOCKS.values()]
    return rows


# --- docutils tables ----------------------------------------------------------------------------------------


def _cell(text: str, literal: bool = False) -> nodes.entry:
    entry = nodes.entry()
    paragraph = nodes.paragraph()
    paragraph += nodes.literal(text, text) if literal else nodes.Text(text)
    entry += paragraph
    return entry


def _table(
    header: list[str], rows: list[tuple[str, ...]], literal_columns: set[int], widths: list[int]
) -> nodes.table:
    table = nodes.table(classes=["eapo-config"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for title in header:
        row += _cell(title)
    head += row
    body = nodes.tbody()
    group += body
    for values in rows:
        row = nodes.row()
        for index, value in enumerate(values):
            row += _cell(value, literal=index in literal_columns and value != "")
        body += row
    return table


class ConfigSection(SphinxDirective):
    """``{eapo-config-section} model.lora``: one section of the ``eapo train`` tree as a table."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        sections = config_sections()
        if name not in sections:
            raise self.error(f"no config section {name!r}; sections: {', '.join(sections)}")
        rendered = getattr(self.env, "eapo_config_sections", set())
        rendered.add(name)
        self.env.eapo_config_sections = rendered
        return [_table(["key", "type", "default", "what"], sections[name], {0, 2}, [22, 14, 14, 50])]


class TRLConfigFields(SphinxDirective):
    """``{eapo-trl-config}``: the fields ``eapo.EAPOConfig`` adds to or overrides in TRL's ``GRPOConfig``."""

    def run(self) -> list[nodes.Node]:
        header = ["field", "type", "default", "TRL's default", "what"]
        return [_table(header, trl_config_rows(), {0, 2, 3}, [18, 12, 10, 10, 50])]


class EntropyControlPresets(SphinxDirective):
    """``{eapo-entropy-controls}``: the entropy-control presets (``algorithm.method``) from the registry."""

    def run(self) -> list[nodes.Node]:
        header = ["method", "source", "settings", "what it does"]
        return [_table(header, entropy_control_rows(), {0, 2}, [14, 30, 22, 40])]


class RewardComponents(SphinxDirective):
    """``{eapo-reward-components}``: the reward components, from their registrations."""

    def run(self) -> list[nodes.Node]:
        header = ["component", "what it scores", "default α", "eval scorer", "eval columns", "plot panels"]
        header.append("eval flags (option)")
        widths = [11, 34, 7, 11, 14, 15, 12]
        return [_table(header, reward_component_rows(), {0, 2, 3, 4, 5, 6}, widths)]


class EvalColumns(SphinxDirective):
    """``{eapo-eval-columns}``: the evaluation columns, from the components' registrations."""

    def run(self) -> list[nodes.Node]:
        header = ["column", "title", "scorer", "per prompt", "Avgs", "strict variant"]
        return [_table(header, eval_column_rows(), {0, 2, 4, 5}, [12, 10, 10, 20, 14, 16])]


class WeightingSchemes(SphinxDirective):
    """``{eapo-weighting-schemes}``: the weighting schemes (``algorithm.method``) from the registry."""

    def run(self) -> list[nodes.Node]:
        header = ["method", "label", "weights (defaults)", "verl estimator", "what it does"]
        return [_table(header, weighting_scheme_rows(), {0, 2, 3}, [12, 12, 26, 12, 38])]


class ClaimsRegistry(SphinxDirective):
    """``{eapo-claims-registry}``: what a claims file can name, from the claims engine's registries."""

    def run(self) -> list[nodes.Node]:
        header = ["key", "name", "options", "what"]
        return [_table(header, claims_registry_rows(), {0, 1, 2}, [12, 14, 24, 50])]


def _check_every_section(app, env) -> None:
    missing = [name for name in config_sections() if name not in getattr(env, "eapo_config_sections", set())]
    if missing:
        logger.warning(
            "config sections not documented by any {eapo-config-section} directive: %s (add them to "
            "docs/guide/configuration.md)",
            ", ".join(missing),
        )


def _merge(app, env, docnames, other) -> None:
    env.eapo_config_sections = getattr(env, "eapo_config_sections", set()) | getattr(
        other, "eapo_config_sections", set()
    )


def _purge(app, env, docname) -> None:
    # sections are re-added when their page is read again
    if docname == "guide/configuration":
        env.eapo_config_sections = set()


def setup(app) -> dict[str, Any]:
    app.add_directive("eapo-config-section", ConfigSection)
    app.add_directive("eapo-trl-config", TRLConfigFields)
    app.add_directive("eapo-entropy-controls", EntropyControlPresets)
    app.add_directive("eapo-reward-components", RewardComponents)
    app.add_directive("eapo-eval-columns", EvalColumns)
    app.add_directive("eapo-weighting-schemes", WeightingSchemes)
    app.add_directive("eapo-claims-registry", ClaimsRegistry)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-check-consistency", _check_every_section)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
