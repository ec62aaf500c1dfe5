"""The ``eapo`` command line (Typer): the top of the pipeline. Each subcommand family is a module of
:mod:`eapo.commands` (``register(app)``) that parses flags and calls the recipe or library function it
names (``eapo train`` -> :func:`eapo.train.run`, ``eapo eval`` -> :mod:`eapo.evaluation`, ...); heavy
imports (torch, transformers) happen inside the commands, so ``--help`` stays fast. The options several
commands share (``--config``, the ``KEY=VALUE`` overrides, ``--engine``, the judge) are declared once, in
:mod:`eapo.commands.options`."""

from __future__ import annotations

import importlib

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


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
