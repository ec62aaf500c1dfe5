"""One declaration per algorithm setting: its name, type, default, valid range, help and citation.

Every setting a weighting scheme, the step or an entropy control reads is declared once, as a
:class:`Setting`, next to the code that reads it (:data:`eapo.core.weighting.WEIGHT_SETTINGS`,
:data:`eapo.core.step.STEP_SETTINGS`, each control's module). Every other view of it is derived
from that declaration, not copied: the ``algorithm`` section of ``eapo train``'s YAML tree
(:mod:`eapo.config.algorithm`), TRL's :class:`eapo.EAPOConfig` fields, the keys ``algorithm.eapo.*``
the verl plugin accepts, and the configuration reference in the docs.

The value checks (:class:`Valid` and its builders :func:`at_least`, :func:`above`, :func:`between`,
:func:`one_of`, :func:`satisfies`) live here too, so that core holds a value to its declared range
without importing the config layer; :mod:`eapo.config.fields` uses the same ones for every other
section of the tree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SettingError",
    "Valid",
    "is_finite",
    "at_least",
    "above",
    "between",
    "one_of",
    "satisfies",
    "FINITE",
    "ANY_OF_TYPE",
    "Setting",
    "settings_by_name",
    "check_settings",
    "derive_fields",
]


class SettingError(ValueError):
    """A setting's value is invalid or does not apply; ``key`` is the key as the user wrote it
    (with the view's prefix: ``algorithm.w0``, ``EAPOConfig.w0``, ``algorithm.eapo.w0``)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Valid:
    """The values a field admits beyond its type: ``test(value)`` on a non-null value of the field's
    type, ``allowed`` in words for the error. ``choices`` lists the values of a closed set."""

    test: Callable[[Any], bool]
    allowed: str
    choices: tuple[str, ...] | None = None
    numeric: bool = False  # a range: the error names the number's kind ("an integer >= 1")

    def admits(self, value: Any) -> bool:
        try:
            return bool(self.test(value))
        except (TypeError, ValueError):
            return False


def is_finite(value: Any) -> bool:
    """A real number that is neither infinite nor NaN (bools are not numbers here)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def at_least(low: float, note: str = "") -> Valid:
    """A finite number ``>= low``."""
    return Valid(lambda v: is_finite(v) and v >= low, f">= {_fmt(low)}{note}", numeric=True)


def above(low: float, note: str = "") -> Valid:
    """A finite number ``> low``."""
    return Valid(lambda v: is_finite(v) and v > low, f"> {_fmt(low)}{note}", numeric=True)


def between(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Valid:
    """A finite number in the interval (brackets as in maths: ``(0, 1]`` excludes 0)."""

    def test(v: Any) -> bool:
        return is_finite(v) and (v > low if low_open else v >= low) and (v < high if high_open else v <= high)

    bounds = f"{'(' if low_open else '['}{_fmt(low)}, {_fmt(high)}{')' if high_open else ']'}"
    return Valid(test, f"in {bounds}", numeric=True)


def one_of(*choices: str) -> Valid:
    return Valid(lambda v: v in choices, ", ".join(choices), tuple(choices))


def satisfies(test: Callable[[Any], bool], allowed: str) -> Valid:
    """A constraint no builder above states (a relation between forms of the value, a pattern)."""
    return Valid(test, allowed)


#: Any finite number (a bound whose relation to another setting is checked with it).
FINITE = Valid(is_finite, "a finite number", numeric=True)
#: The field's type is the whole constraint (a switch, free text, a mapping read by another module).
#: Declared explicitly so that a new field cannot go unchecked by omission.
ANY_OF_TYPE = Valid(lambda v: True, "any value of its type")

_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


@dataclass(frozen=True)
class Setting:
    """One algorithm setting, declared once where the code that reads it lives.

    Attributes:
        name: the key users write (``algorithm.<name>`` in the YAML tree, ``EAPOConfig(<name>=...)``
            on TRL, ``algorithm.eapo.<name>`` on verl).
        type: ``float``, ``int``, ``bool`` or ``str``.
        help: one line for ``--help``, the docs and the TRL config's metadata.
        valid: what a value admits beyond its type.
        default: the value the code uses when the setting is unset. ``None`` where the default is
            the owner's (a weighting scheme's own ``w_pos``, a preset's value): the help says which.
        citation: where the setting and its default come from (a paper, a reference implementation).
        symbol: how labels, tables and legends write it (``w+`` for ``w_pos``); the name when empty.
    """

    name: str
    type: type
    help: str
    valid: Valid
    default: Any = None
    citation: str = ""
    symbol: str = ""

    @property
    def shown_as(self) -> str:
        """The symbol labels write, or the name."""
        return self.symbol or self.name

    @property
    def doc(self) -> str:
        """The help with its citation, as the derived views show it."""
        return f"{self.help} [{self.citation}]" if self.citation else self.help

    def allowed(self) -> str:
        """What the setting admits, in words."""
        if self.valid.numeric:
            return f"{'an integer' if self.type is int else 'a number'} {self.valid.allowed}"
        if self.valid is ANY_OF_TYPE:
            return _TYPE_NAMES.get(self.type, self.type.__name__)
        return self.valid.allowed

    def check(self, value: Any, where: str = "", *, nullable: bool = False) -> Any:
        """``value`` held to the declared type and range (ints become floats for a float setting);
        ``nullable``: the view admits null for it (unset), which the error says.

        Raises:
            ValueError: naming ``where + name``, the value and what is allowed.
        """
        key = f"{where}{self.name}"
        if self.type is float and is_finite(value):
            value = float(value)
        ok_type = isinstance(value, self.type) and not (self.type is not bool and isinstance(value, bool))
        if not ok_type or not self.valid.admits(value):
            allowed = self.allowed() + (", or null" if nullable else "")
            raise SettingError(f"{key}={value!r} is invalid; valid: {allowed}", key)
        return value


def settings_by_name(settings: Iterable[Setting]) -> dict[str, Setting]:
    """``name -> Setting``; a name declared twice raises (one declaration per setting)."""
    out: dict[str, Setting] = {}
    for setting in settings:
        if setting.name in out and out[setting.name] is not setting:
            raise ValueError(f"setting {setting.name!r} is declared twice")
        out[setting.name] = setting
    return out


def check_settings(
    declared: Mapping[str, Setting], values: Mapping[str, Any], where: str = "", *, nullable: bool = False
) -> dict[str, Any]:
    """The non-null ``values`` held to their declarations (``nullable``: the view admits null for them, as
    errors say); an undeclared key raises naming the known ones."""
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise SettingError(
            f"{where}{unknown[0]} is not a setting here; known: {', '.join(declared)}", f"{where}{unknown[0]}"
        )
    return {
        key: declared[key].check(value, where, nullable=nullable)
        for key, value in values.items()
        if value is not None
    }


def derive_fields(
    after: str | None,
    declared: Iterable[Setting],
    make_field: Callable[[Setting], Any],
    *,
    nullable: bool = True,
) -> Callable[[type], type]:
    """A class decorator, applied under ``@dataclass``, that adds one field per declared setting:
    annotated with the setting's type (``| None`` when ``nullable``), its default and metadata from
    ``make_field(setting)`` (a ``dataclasses.field``), placed after the field ``after`` (first when
    None). How the YAML tree and TRL's config derive their views of the settings."""
    declared = list(declared)

    def decorate(cls: type) -> type:
        added: dict[str, Any] = {}
        for spec in declared:
            added[spec.name] = (spec.type | None) if nullable else spec.type
            setattr(cls, spec.name, make_field(spec))
        ordered: dict[str, Any] = dict(added) if after is None else {}
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            ordered[name] = annotation
            if name == after:
                ordered.update(added)
        if after is not None and after not in ordered:
            raise ValueError(f"{cls.__name__} has no field {after!r} to place settings after")
        cls.__annotations__ = ordered
        return cls

    return decorate
