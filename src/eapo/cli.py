"""The ``eapo`` command line (Typer): the top of the pipeline. Each subcommand family is a module of
:mod:`eapo.commands` (``register(app)``) that parses flags and calls the recipe or library function it
names (``eapo train`` -> :func:`eapo.train.run`, ``eapo eval`` -> :mod:`eapo.evaluation`, ...); heavy
imports (torch, transformers) happen inside the commands, so ``--help`` stays fast. The options several
commands share (``--config``, the ``KEY=VALUE`` overrides, ``--engine``, the judge) are declared once, in
:mod:`eapo.commands.options`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import typer

app = typer.Typer(
    name="eapo",
    help="EAPO: entropy-driven adaptive positive/negative weighting for RL post-training on open-ended QA.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """EAPO command line: train, eval, plot, sweep, study, data tools and a local LLM judge."""


# Modules that expose ``register(app)``; one line per subcommand family.
_COMMAND_MODULES = [
    "eapo.commands.train",
    "eapo.commands.weights",
    "eapo.commands.data",
    "eapo.commands.eval",
    "eapo.commands.plot",
    "eapo.commands.sweep",
    "eapo.commands.study",
    "eapo.commands.verl_export",
    "eapo.commands.summary",
    "eapo.commands.judge",
]


def _register() -> None:
    for module in _COMMAND_MODULES:
        importlib.import_module(module).register(app)


def _config_plugins(argv: list[str]) -> list[str]:
    """The ``plugins:`` of the config the command line names (``--config FILE`` or a packaged preset's name)
    and of a ``plugins=[...]`` override, read before any command imports eapo's config: a plugin's own
    settings are fields of the config only if it registered first (:mod:`eapo.plugins`). Reads nothing
    eapo validates; :func:`eapo.config.load_config` checks the list again when the config is read."""
    from importlib import resources

    import yaml

    names: list[str] = []
    for index, arg in enumerate(argv):
        value = None
        if arg == "--config" and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith("--config="):
            value = arg.split("=", 1)[1]
        if value is not None:
            path = Path(value)
            if not path.is_file():
                path = Path(str(resources.files("eapo") / "configs" / f"{path.stem}.yaml"))
            try:
                tree = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}
            except (OSError, yaml.YAMLError):
                tree = {}  # the command reports a bad file itself
            listed = tree.get("plugins") if isinstance(tree, dict) else None
            names += [name for name in listed or [] if isinstance(name, str)]
        elif arg.startswith("plugins="):
            try:
                listed = yaml.safe_load(arg.split("=", 1)[1])
            except yaml.YAMLError:
                listed = None
            names += (
                [name for name in listed or [] if isinstance(name, str)] if isinstance(listed, list) else []
            )
    return names


def _load_plugins_first() -> None:
    from eapo.plugins import PluginError, load_plugins

    try:
        load_plugins(_config_plugins(sys.argv[1:]), where="plugins")
    except PluginError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


_load_plugins_first()
_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
