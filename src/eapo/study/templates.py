"""The texts of a claims file: templates over a claim's quantities (:mod:`eapo.study.claims`).

A template is a Python format string over the claim's quantities, constants and parameters, printed by
:class:`TemplateFormatter`: an interval as ``mean [low, high]`` (``{slope:5}``: five digits), anything not
measured as ``–``, a list of numbers joined with ``, `` (``{h0:.3f}``), a role by its name
(``{best:name}``; ``{roles:names}`` for a list of them). A template may also be a list of strings and
:class:`Each` loops: ``{each: ..., item: ..., sep: ..., order: declared | sorted | ranked, skip: [...]}``
over a quantity with one value per role, or over a list of quantities (``{name}``, ``{role}``,
``{value}`` in ``item``; every other quantity with one value per role, at the item's role).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eapo.study.quantities import Reading
from eapo.study.stats import Interval

__all__ = ["TemplateFormatter", "Each", "Template", "Layered", "Values"]


class TemplateFormatter(string.Formatter):
    """The formatter of every claims-file text: intervals as ``mean [low, high]`` (spec: digits), not measured as ``–``, lists joined, roles by name."""

    def __init__(self, names: Mapping[str, str]):
        super().__init__()
        self.names = names

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            return "–"
        if isinstance(value, Interval):
            return value.text(int(format_spec) if format_spec else 3)
        if format_spec == "name":
            return self.names.get(value, value)
        if format_spec == "names":
            return ", ".join(self.names.get(v, v) for v in value)
        if isinstance(value, list | tuple):
            return ", ".join(format(v, format_spec) for v in value)
        return format(value, format_spec)


@dataclass(frozen=True)
class Each:
    """A loop of a template: ``item`` once per role of a ``roles:`` quantity, or per quantity of a list."""

    over: str | tuple[str, ...]
    item: str
    sep: str = "; "
    order: str = "declared"  # declared | sorted (by role) | ranked (by mean, highest first, measured only)
    skip: tuple[str, ...] = ()


@dataclass(frozen=True)
class Template:
    """Text with ``{field}``s: strings and :class:`Each` loops, concatenated."""

    pieces: tuple[str | Each, ...]

    def render(self, values: Mapping[str, Any], reading: Reading | None, names: Mapping[str, str]) -> str:
        formatter = TemplateFormatter(names)
        out = []
        for piece in self.pieces:
            if isinstance(piece, str):
                out.append(formatter.vformat(piece, (), values))
                continue
            items = _items(piece, values, reading)
            families = {k: v for k, v in _family_values(reading).items() if k != piece.over}
            out.append(
                piece.sep.join(
                    formatter.vformat(
                        piece.item,
                        (),
                        Layered(
                            {"name": names.get(role, role), "role": role, "value": value}
                            | {k: v.get(role) for k, v in families.items()},
                            values,
                        ),
                    )
                    for role, value in items
                )
            )
        return "".join(out)


def _items(each: Each, values: Mapping[str, Any], reading: Reading | None) -> list[tuple[str, Any]]:
    if isinstance(each.over, str):
        family = values[each.over] or {}
        items = [(role, value) for role, value in family.items() if role not in each.skip]
    else:
        quantities = reading.quantities if reading is not None else {}
        items = [
            (getattr(quantities.get(name), "role", None) or name, values[name])
            for name in each.over
            if name not in each.skip
        ]
    if each.order == "sorted":
        return sorted(items, key=lambda item: item[0])
    if each.order == "ranked":
        return sorted((item for item in items if item[1] is not None), key=lambda item: -item[1].mean)
    return items


def _family_values(reading: Reading | None) -> dict[str, dict[str, Any]]:
    """The claim's quantities with one value per role (a ``roles:`` quantity, or one computed from it)."""
    if reading is None:
        return {}
    return {name: reading[name] for name in reading.quantities if isinstance(reading[name], dict)}


class Layered(Mapping[str, Any]):
    """The first mapping that holds a key."""

    def __init__(self, *layers: Mapping[str, Any]):
        self.layers = layers

    def __getitem__(self, key: str) -> Any:
        for layer in self.layers:
            if key in layer:
                return layer[key]
        raise KeyError(key)

    def __iter__(self):
        seen: set[str] = set()
        for layer in self.layers:
            for key in layer:
                if key not in seen:
                    seen.add(key)
                    yield key

    def __len__(self) -> int:
        return len(set().union(*self.layers))


class Values(Mapping[str, Any]):
    """A reading's quantities as a mapping (computed on first use)."""

    def __init__(self, reading: Reading):
        self.reading = reading

    def __getitem__(self, key: str) -> Any:
        if key not in self.reading:
            raise KeyError(key)
        return self.reading[key]

    def __iter__(self):
        return iter(self.reading.quantities)

    def __len__(self) -> int:
        return len(self.reading.quantities)
