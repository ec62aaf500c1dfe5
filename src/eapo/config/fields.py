"""What each setting of the ``eapo train`` tree admits, and the checks that hold a value to it.

The value checks (:class:`Valid` and its builders) are :mod:`eapo.core.settings`'s, shared with the
algorithm settings core declares. Every field of a section is declared with :func:`setting`: its one-line help string, its default and,
for a setting (not a section), ``valid=``: one of :func:`at_least`, :func:`above`, :func:`between`,
:func:`one_of`, :data:`NON_EMPTY`, :func:`satisfies`, or :data:`ANY_OF_TYPE` where every value of its
type is valid (a new field without one fails ``tests/config/test_config_validation.py``).
:func:`coerce` holds a value to the field's annotation, :func:`allowed` says in words what a field
admits (errors and ``--help``), and :class:`ConfigError` is the one error they raise.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import Any

from eapo.core.settings import (
    ANY_OF_TYPE,
    FINITE,
    Setting,
    Valid,
    above,
    at_least,
    between,
    derive_fields,
    is_finite,
    one_of,
    satisfies,
)
from eapo.data.splits import SPLIT_NAMES, normalize_split

__all__ = [
    "ConfigError",
    "Valid",
    "is_finite",
    "at_least",
    "above",
    "between",
    "one_of",
    "satisfies",
    "FINITE",
    "NON_EMPTY",
    "ANY_OF_TYPE",
    "URL",
    "ENV_NAME",
    "SPLIT",
    "setting",
    "derived",
    "with_settings",
    "allowed",
    "is_section",
    "coerce",
]


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message names the key and what to do.

    ``key`` is the dotted key at fault, when there is one (``load_config`` names the override that set it).
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def _non_empty(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value.strip())
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.strip() for v in value)


#: Free text that must say something: a name, a path, a split.
NON_EMPTY = Valid(_non_empty, "a non-empty string")

#: An http(s) URL (the judge's endpoint, a vLLM server).
URL = satisfies(
    lambda v: isinstance(v, str) and re.fullmatch(r"https?://\S+", v) is not None,
    "an http:// or https:// URL",
)
#: The name of an environment variable (where a secret is read from, never the secret itself).
ENV_NAME = satisfies(
    lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) is not None,
    "the name of an environment variable (letters, digits, _)",
)


def _split(value: Any) -> bool:
    normalize_split(value)  # DataError (a ValueError) for an unknown split
    return True


#: A split of a dataset, as :func:`eapo.data.load` reads it (``data.split``, ``train.eval_split``).
SPLIT = satisfies(
    _split,
    "a split name (" + ", ".join(SPLIT_NAMES) + "), a fraction such as '0.9' or a range such as '0.9:1.0'",
)


def derived(declared: Setting, *, nullable: bool = True) -> Any:
    """A field of the tree derived from an algorithm setting core declares (:class:`eapo.core.settings.Setting`):
    its help (with the citation) and range are the declaration's; the default is ``None`` ("the
    scheme's or the preset's", as the help says) when ``nullable``, else the declared default."""
    return setting(declared.doc, None if nullable else declared.default, valid=declared.valid)


def with_settings(
    after: str | None, declared: Iterable[Setting], *, nullable: bool = True
) -> Callable[[type], type]:
    """A class decorator (under ``@dataclass``) that adds a :func:`derived` field per declared setting,
    placed after the field ``after`` (:func:`eapo.core.settings.derive_fields`), so that a section
    derives its algorithm settings from core's declarations instead of copying them."""
    return derive_fields(after, declared, lambda spec: derived(spec, nullable=nullable), nullable=nullable)


def setting(
    text: str,
    default: Any = dataclasses.MISSING,
    factory: Any = dataclasses.MISSING,
    valid: Valid | None = None,
) -> Any:
    """A field with its help string and, for a setting (not a section), what it admits (``valid``)."""
    metadata: dict[str, Any] = {"help": text}
    if valid is not None:
        metadata["valid"] = valid
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


# --------------------------------------------------------------------------------------------
# Holding a value to its field
# --------------------------------------------------------------------------------------------


def allowed(spec: dataclasses.Field, tp: Any) -> str:
    """What the setting ``spec`` of type ``tp`` admits, in words (for errors and ``--help``)."""
    valid = spec.metadata.get("valid")
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    plain = [arg for arg in args if arg is not type(None)]
    if valid is None:
        text = " or ".join(_type_name(arg) for arg in plain)
    elif valid.numeric:
        text = f"{'an integer' if int in plain else 'a number'} {valid.allowed}"
    else:
        text = valid.allowed
    return text + (", or null" if type(None) in args else "")


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is dict:
        return "a mapping"
    if origin is list:
        return "a list"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def is_section(tp: Any) -> bool:
    """Whether the annotation ``tp`` is a section of the tree (a dataclass) rather than a setting."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp`` (ints accepted for floats)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(key, value, arg)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {value!r}")
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a mapping, got {value!r}")
        return dict(value)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{key} must be a list, got {value!r}")
        return list(value)
    if tp is Any:
        return value
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is bool and isinstance(value, bool):
        return value
    if tp is str and isinstance(value, str):
        return value
    raise ConfigError(f"{key} must be {getattr(tp, '__name__', tp)}, got {value!r}")
