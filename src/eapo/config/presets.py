"""The presets shipped inside the package (``eapo/configs/*.yaml``: ``demo``, ``tiny``, ``paper_rjua``,
``study``, ...) and the one rule that turns a ``--config`` value into a file: an existing file is read;
a bare name (``tiny``, ``tiny.yaml``) that is not a file is the packaged preset of that name, so an
installed eapo runs its presets from any directory; anything else is an error that lists the presets.

Every command that takes ``--config`` (``eapo train``, ``eval``, ``sweep``, ``study``) and
:func:`eapo.config.load_config` resolve it with :func:`resolve_config`."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from eapo.config.fields import ConfigError

__all__ = ["preset_names", "packaged_config", "resolve_config"]


def _preset_dir() -> Path:
    return Path(str(resources.files("eapo") / "configs"))


def preset_names() -> list[str]:
    """The packaged presets' names, sorted (``demo``, ``demo_gpu``, ..., ``tiny``)."""
    return sorted(path.stem for path in _preset_dir().glob("*.yaml"))


def packaged_config(name: str) -> Path:
    """The file of the packaged preset ``name`` (``demo``, ``tiny``, ``paper_rjua``, ``study``, ...).

    Raises:
        ConfigError: no preset has that name (the message lists them).
    """
    path = _preset_dir() / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"no packaged preset {name!r}; presets: {', '.join(preset_names())}")
    return path


def resolve_config(config: str | os.PathLike) -> Path:
    """The config file ``config`` names: itself when it is a file, else the packaged preset of that
    name when it is a bare name (no folder; no suffix or ``.yaml``).

    Raises:
        ConfigError: neither exists; the message names the value and lists the presets.
    """
    path = Path(config)
    if path.is_file():
        return path
    bare = path.parent == Path(".") and path.suffix in ("", ".yaml")
    if bare and (_preset_dir() / f"{path.stem}.yaml").is_file():
        return packaged_config(path.stem)
    what = "is a folder" if path.is_dir() else "does not exist"
    raise ConfigError(
        f"config {str(config)!r} {what}, and no packaged preset has that name; give a YAML file or one "
        f"of the presets: {', '.join(preset_names())}"
    )
