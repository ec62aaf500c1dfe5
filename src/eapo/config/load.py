"""Reading a configuration: YAML files (numbers as a user writes them, :class:`ConfigLoader`),
``key=value`` overrides, building the tree with unknown keys named, and errors that say which file,
which key and which override; :func:`dump_config` writes a tree back as YAML."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

import yaml

from eapo.config.fields import ConfigError, allowed, coerce, is_section
from eapo.config.presets import resolve_config
from eapo.config.tree import RunConfig
from eapo.plugins import PluginError, load_plugins


def _build(cls: type, values: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in values if k not in names]
    if unknown and prefix == "algorithm." and unknown[0] in registered_settings():
        raise ConfigError(
            f"algorithm.{unknown[0]} is a setting registered after eapo's config was built (by a plugin module "
            "imported late): name the module in EAPO_PLUGINS before Python starts, or in the config's plugins: "
            "with the eapo command line, which reads that list first",
            key=prefix + unknown[0],
        )
    if unknown:
        where = f"section {prefix.rstrip('.')!r}" if prefix else "the top level"
        raise ConfigError(
            f"unknown key {prefix + unknown[0]!r} in {where}; valid keys: {', '.join(names)}",
            key=prefix + unknown[0],
        )
    kwargs = {}
    for name, value in values.items():
        tp = hints[name]
        if is_section(tp):
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{prefix + name} must be a mapping of {', '.join(f.name for f in dataclasses.fields(tp))}"
                )
            kwargs[name] = _build(tp, value, f"{prefix}{name}.")
        else:
            try:
                kwargs[name] = coerce(prefix + name, value, tp)
            except ConfigError as error:
                spec = next(f for f in dataclasses.fields(cls) if f.name == name)
                raise ConfigError(f"{error}; valid: {allowed(spec, tp)}", key=prefix + name) from None
    return cls(**kwargs)


class ConfigLoader(yaml.SafeLoader):
    """YAML with numbers read as a user writes them: ``1e-5``, ``3E-4``, ``1.0e5``, ``.5`` and ``-.5``
    are floats. PyYAML follows YAML 1.1, whose float needs a dot and a signed exponent, so it reads
    ``1e-5`` as the string '1e-5'."""


_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.VERBOSE,
)
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def yaml_load(text: str) -> Any:
    """Parse YAML text with :class:`ConfigLoader` (config files, overrides, saved ``config.yaml``)."""
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - a SafeLoader subclass


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {dotted!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["algorithm.method=psr", "train.max_steps=3"]`` → a nested dict (values parsed as YAML)."""
    tree: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(
                f"override {item!r} must look like section.key=value (e.g. algorithm.method=psr)"
            )
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"override {item!r} has an empty key")
        try:
            value = yaml_load(raw) if raw.strip() else None
        except yaml.YAMLError as error:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({error})") from error
        _set_dotted(tree, key, value)
    return tree


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key not in ("weights", "options"):
            out[key] = _merge(out[key], value)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def read_config_tree(path: Path) -> dict[str, Any]:
    """A config YAML file as a plain nested dict (no validation); ConfigError names the file."""
    try:
        tree = yaml_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from error
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return tree


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML config (or start from the defaults), apply ``key=value`` overrides, validate.

    ``path`` is a file or a packaged preset's name (:func:`eapo.config.resolve_config`). A
    :class:`ConfigError` is one line that names the file, the key, the value and what is allowed, and
    the override that set the value when one did."""
    tree: dict[str, Any] = {}
    if path is not None:
        path = resolve_config(path)
        tree = read_config_tree(path)
    return config_from_tree(tree, overrides, source=path)


def config_from_tree(
    tree: dict[str, Any], overrides: list[str] | None = None, *, source: str | Path | None = None
) -> RunConfig:
    """:func:`load_config` of a tree already read (``source`` names where it came from in errors)."""
    overrides = list(overrides or [])
    tree = _merge(tree, parse_overrides(overrides))
    try:
        _load_plugins(tree.get("plugins"))  # before the algorithm section is read: their registrations
        return _build(RunConfig, tree, "").validate()
    except ConfigError as error:
        where = f"{source}: " if source is not None else ""
        given = [item for item in overrides if error.key and _overrides_key(item, error.key)]
        set_by = f" (set by the override {given[-1]!r})" if given else ""
        raise ConfigError(f"{where}{error}{set_by}", key=error.key) from None


def registered_settings() -> set[str]:
    """Every algorithm setting registered now (a plugin's included)."""
    from eapo.core import CONTROL_SETTINGS, WEIGHT_SETTINGS

    return {*WEIGHT_SETTINGS, *CONTROL_SETTINGS}


def _load_plugins(names: Any) -> None:
    """Import the config's ``plugins`` (:func:`eapo.plugins.load_plugins`); ConfigError names the key."""
    if not names:
        return
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ConfigError(f"plugins={names!r} is invalid; valid: a list of module names", key="plugins")
    try:
        load_plugins(names, where="plugins")
    except PluginError as error:
        raise ConfigError(str(error), key="plugins") from None


def _overrides_key(item: str, key: str) -> bool:
    """Whether the override ``item`` sets ``key`` (itself, a section above it, or an entry below it)."""
    name = item.split("=", 1)[0].strip()
    return name == key or key.startswith(name + ".") or name.startswith(key + ".")


def dump_config(config: RunConfig) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True)


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_changes(saved: str | Path, config: RunConfig) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (saved value, value in config)}`` for every setting a run's saved ``config.yaml``
    and ``config`` disagree on, in key order.

    The saved file is read through this version's defaults, so a setting added since the run was
    configured (absent from the file, taking its default) is not a change: ``eapo train --resume`` and
    ``eapo sweep``/``eapo study``'s skip of finished runs both use this one rule. Raises
    :class:`ConfigError` (naming the file) when the file cannot be read as a config."""
    old = _flat(load_config(saved).to_dict())
    new = _flat(config.to_dict())
    return {
        key: (old.get(key), new.get(key))
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    }
