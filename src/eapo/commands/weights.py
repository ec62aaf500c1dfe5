"""``eapo weights``: print the weights a scheme yields along an entropy trajectory."""

from __future__ import annotations

import typer


def weights(
    entropies: str = typer.Option(
        "1.20,1.10,0.95,0.80,0.70,0.75,0.90,1.30,1.80,2.60,3.50",
        help="Comma-separated rollout entropies H_0, H_1, ... (nats/token).",
    ),
    method: str = typer.Option(
        "eapo", help="Weighting scheme: grpo, psr, nsr, w_reinforce, qae, eapo, eapo_pi."
    ),
    w0: float = typer.Option(None, help="EAPO base positive weight (default 0.2)."),
    w_min: float = typer.Option(None, help="EAPO lower clip (default 0)."),
    w_max: float = typer.Option(None, help="EAPO upper clip (default 2)."),
    integral_gain: float = typer.Option(None, help="EAPO's integral term k_I (default 0; eapo_pi: 0.2)."),
) -> None:
    """Show (w+, w-) per step for an entropy trajectory (Eq. dynamic_weight)."""
    from eapo.core import make_weighting

    try:
        values = [float(x) for x in entropies.split(",") if x.strip()]
        overrides = (
            {"w0": w0, "w_min": w_min, "w_max": w_max, "integral_gain": integral_gain}
            if method in ("eapo", "eapo_pi")
            else {}
        )
        scheme = make_weighting(method, **overrides)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    typer.echo(f"{scheme!r}")
    typer.echo(f"{'step':>4}  {'H_t':>8}  {'w+':>7}  {'w-':>5}")
    for step, entropy in enumerate(values):
        w_pos, w_neg = scheme.weights(entropy)
        typer.echo(f"{step:>4}  {entropy:>8.4f}  {w_pos:>7.4f}  {w_neg:>5.2f}")


def register(app: typer.Typer) -> None:
    app.command("weights")(weights)
