"""``eapo weights``: print the weights a scheme yields along an entropy trajectory.

Its options are not declared here: ``--method`` lists the registered weighting schemes
(:data:`eapo.core.WEIGHTING_SCHEMES`) and every weight setting (:data:`eapo.core.WEIGHT_SETTINGS`:
``--w0``, ``--w-min``, ``--w-pos``, ...) is an option with the setting's own help, type and range and
the defaults of the schemes that take it, so a setting or scheme registered in core appears here
unedited. Each is spelt as its key too (``--w_min``). They are built when the command line is parsed
or its help shown, not when ``eapo`` starts: importing :mod:`eapo.core` imports torch.
"""

from __future__ import annotations

import enum
import inspect
from typing import Any

import typer
from typer.core import TyperCommand

_DEFAULT_METHOD = "eapo"
_ENTROPIES: Any = typer.Option(
    "1.20,1.10,0.95,0.80,0.70,0.75,0.90,1.30,1.80,2.60,3.50",
    "--entropies",
    help="Comma-separated rollout entropies H_0, H_1, ... (nats/token).",
)


def _option_names(name: str) -> list[str]:
    """``w_min`` -> ``["--w-min", "--w_min"]``: Typer's spelling and the config key's."""
    dashed, keyed = f"--{name.replace('_', '-')}", f"--{name}"
    return [dashed] if dashed == keyed else [dashed, keyed]


def _escape(text: str) -> str:
    """Help text as Typer's rich help prints it literally (a citation in brackets is not markup)."""
    try:
        from rich.markup import escape
    except ImportError:  # typer without rich prints help as it is
        return text
    return escape(text)


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def _defaults_text(name: str) -> str:
    """``w0`` -> ``"0.2 (eapo, eapo_pi)"``: each default with the schemes that use it."""
    from eapo.core import WEIGHTING_SCHEMES, scheme_defaults

    by_value: dict[str, list[str]] = {}
    for scheme in WEIGHTING_SCHEMES:
        defaults = scheme_defaults(scheme)
        if name in defaults:
            by_value.setdefault(_shown(defaults[name]), []).append(scheme)
    return "; ".join(f"{value} ({', '.join(schemes)})" for value, schemes in by_value.items())


def _setting_help(setting: Any) -> str:
    """A setting's help as core declares it, with what it admits, the schemes' defaults and its citation."""
    defaults = _defaults_text(setting.name)
    text = f"{setting.help} Valid: {setting.allowed()}." + (f" Default: {defaults}." if defaults else "")
    return _escape(f"{text} [{setting.citation}]" if setting.citation else text)


def weights_command() -> Any:
    """The command ``eapo weights`` runs, built from core's declarations: a Typer command whose function
    takes ``--entropies``, ``--method`` (one of the registered schemes) and one option per weight setting."""
    from eapo.core import WEIGHT_SETTINGS, WEIGHTING_SCHEMES, make_weighting

    scheme_names = enum.Enum("Scheme", {name: name for name in WEIGHTING_SCHEMES}, type=str)

    def show(entropies: str, method: Any, **chosen: Any) -> None:
        given = {name: value for name, value in chosen.items() if value is not None}
        for name, value in given.items():  # each value held to its declared type and range
            try:
                WEIGHT_SETTINGS[name].check(value, where="--")
            except ValueError as error:
                raise typer.BadParameter(str(error), param_hint=_option_names(name)[0]) from None
        try:
            values = [float(x) for x in entropies.split(",") if x.strip()]
            scheme = make_weighting(method.value, **given)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from error
        typer.echo(f"{scheme!r}")
        typer.echo(f"{'step':>4}  {'H_t':>8}  {'w+':>7}  {'w-':>5}")
        for step, entropy in enumerate(values):
            w_pos, w_neg = scheme.weights(entropy)
            typer.echo(f"{step:>4}  {entropy:>8.4f}  {w_pos:>7.4f}  {w_neg:>5.2f}")

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [
        inspect.Parameter("entropies", keyword, default=_ENTROPIES, annotation=str),
        inspect.Parameter(
            "method",
            keyword,
            default=typer.Option(
                scheme_names[_DEFAULT_METHOD],
                "--method",
                help="Weighting scheme (algorithm.method); each weight below applies to the schemes that take it.",
            ),
            annotation=scheme_names,
        ),
    ]
    for setting in WEIGHT_SETTINGS.values():
        option = typer.Option(None, *_option_names(setting.name), help=_setting_help(setting))
        parameters.append(
            inspect.Parameter(setting.name, keyword, default=option, annotation=setting.type | None)
        )
    show.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    show.__annotations__ = {p.name: p.annotation for p in parameters}
    app = typer.Typer(add_completion=False)
    app.command()(show)
    return typer.main.get_command(app)


class _WeightSettingsCommand(TyperCommand):
    """``eapo weights``: its parameters and function are those of :func:`weights_command`, built the first
    time the command line is parsed or the help shown (so ``eapo`` itself starts without torch)."""

    _built = False

    def get_params(self, ctx: Any) -> list[Any]:
        if not self._built:
            built = weights_command()
            self.params, self.callback = list(built.params), built.callback
            self._built = True
        return super().get_params(ctx)


def weights() -> None:
    """Show (w+, w-) per step for an entropy trajectory (Eq. dynamic_weight)."""


def register(app: typer.Typer) -> None:
    app.command("weights", cls=_WeightSettingsCommand)(weights)
