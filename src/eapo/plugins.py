"""Your own weighting scheme, entropy control or reward component, in a module of your own.

A plugin is an importable module that registers at import, with the same calls eapo's built-ins use:
:func:`eapo.core.register_weighting`, :func:`eapo.core.register_entropy_control` and the reward
components' registry. Name it once and every process eapo or verl starts imports it before it reads a
setting:

* ``EAPO_PLUGINS=my_pkg.my_scheme[,other.module]`` in the environment: :mod:`eapo` imports them when it is
  first imported (the CLI, a TRL script, ``accelerate launch``'s workers, verl's driver, workers and reward
  workers, which import eapo through verl's plugin entry point), so a scheme's own settings are fields of
  ``EAPOConfig`` and of the ``algorithm`` section like the built-ins';
* ``plugins: [my_pkg.my_scheme]`` in an ``eapo train`` config: the CLI reads the list before anything else
  and adds it to ``EAPO_PLUGINS``, which every process it starts inherits.

A plugin module imports only :mod:`eapo.core` and :mod:`eapo.rewards` (the layers whose registries it
fills), so that eapo's derived views (the config sections, ``EAPOConfig``) are built after it registers.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable

__all__ = ["ENV_VAR", "PluginError", "load_plugins", "plugin_names"]

#: The environment variable naming the plugin modules, comma-separated.
ENV_VAR = "EAPO_PLUGINS"

_LOADED: list[str] = []


class PluginError(ImportError):
    """A plugin module could not be imported (the message names it and where it was listed)."""


def plugin_names(value: str | None) -> list[str]:
    """``"a.b, c"`` -> ``["a.b", "c"]`` (empty entries dropped)."""
    return [name.strip() for name in (value or "").split(",") if name.strip()]


def load_plugins(names: Iterable[str] | None = None, *, where: str = ENV_VAR) -> list[str]:
    """Import the plugin modules ``names`` (None: those :data:`ENV_VAR` lists) once each, and add them to
    :data:`ENV_VAR` so that every process started from here imports them too. Returns the newly imported.

    Raises:
        PluginError: a module that cannot be imported, naming it, ``where`` it was listed and the cause.
    """
    names = plugin_names(os.environ.get(ENV_VAR)) if names is None else [n.strip() for n in names]
    imported = []
    for name in names:
        if name in _LOADED:
            continue
        try:
            importlib.import_module(name)
        except Exception as error:  # an import error, or the plugin's own registration failing
            raise PluginError(
                f"{where}: the plugin module {name!r} could not be imported: {type(error).__name__}: {error} "
                "(it must be importable from this environment: on the Python path or installed)"
            ) from error
        _LOADED.append(name)
        imported.append(name)
    listed = plugin_names(os.environ.get(ENV_VAR))
    missing = [name for name in _LOADED if name not in listed]
    if missing:
        os.environ[ENV_VAR] = ",".join([*listed, *missing])
    return imported
