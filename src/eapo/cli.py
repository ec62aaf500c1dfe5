"""The ``eapo`` command line (Typer). Each subcommand lives beside the code it drives and is
registered here; heavy imports (torch, transformers) happen inside the commands, so ``--help``
stays fast."""

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
