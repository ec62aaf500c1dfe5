"""The training-dynamics figure (the EAPO paper's "Training Dynamics" figures) from ``metrics.jsonl``.

One panel per quantity against the optimisation step — rollout entropy, reward (the composite and
each component), the validation reward (``val/reward``, logged every ``train.eval_steps`` steps, its
points marked), response length, the positive weight ``w+``, the KL to the reference, the PPO
clip fraction and the entropy controls' ``entropy_control/*`` metrics — with one line per run, labelled by its method and weights (read from the run's
``config.yaml``). Each run's raw values are drawn faint and an exponential moving average on top.

Lines: in every panel a run has exactly one *labelled* line (the smoothed one, labelled with the run's
label) and one raw line whose label starts with ``_`` (matplotlib's "not in the legend" convention).
A panel appears when at least one run logged its key; a run that did not log a key has no line there.

Uses matplotlib's object API (no ``pyplot``), so it never needs a display and keeps no global state.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from eapo.core.controls import actuator_panels, control_panels
from eapo.evaluation.labels import run_label
from eapo.rewards.registry import REWARD_COMPONENTS, component_panels
from eapo.run_dir import CAP_SHARE_KEY, METRICS_FILE, atomic_write_bytes, cap_share, read_metrics

__all__ = [
    "plot_runs",
    "plot_seed_bands",
    "seed_band",
    "line_style",
    "ema",
    "auto_smoothing",
    "panel_keys",
    "PANELS",
    "BAND_PANELS",
    "RATIO_KEY",
    "with_entropy_ratio",
    "RAW_PREFIX",
]

#: Fixed panels: metrics.jsonl key -> title. The reward components' panels (their registrations',
#: :func:`eapo.rewards.registry.component_panels`) go after reward/mean.
PANELS: tuple[tuple[str, str], ...] = (
    ("entropy/rollout", "Entropy (rollout, nats/token)"),
    ("reward/mean", "Reward"),
    ("val/reward", "Validation reward (dev subset)"),
    ("completion/mean_length", "Response length (tokens)"),
    ("eapo/w_pos", "w+ (positive weight)"),
    ("eapo/integral", "EAPO integral I_t (integral_gain > 0)"),
    ("kl", "KL to reference"),
    ("clip_frac", "Clip fraction"),
    # the entropy controls' metrics, from their registrations (eapo.core.controls), drawn when a run logged them
    *control_panels(),
)
#: Label prefix of the faint raw-value lines (hidden from legends).
RAW_PREFIX = "_raw "


def ema(values: Sequence[float | None], smoothing: float = 0.6) -> np.ndarray:
    """Debiased exponential moving average (TensorBoard's): ``m_t = s·m_{t-1} + (1-s)·x_t``, ``m_t / (1 - s^n)``.

    ``None``/NaN entries are skipped (they stay NaN and do not move the average). ``smoothing`` in
    ``[0, 1)``; 0 returns the values unchanged.
    """
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    out = np.full(len(values), np.nan)
    average, seen = 0.0, 0
    for index, value in enumerate(values):
        if value is None or not math.isfinite(value):
            continue
        seen += 1
        average = smoothing * average + (1 - smoothing) * float(value)
        out[index] = average / (1 - smoothing**seen)
    return out


def auto_smoothing(num_steps: int) -> float:
    """``clip(1 - 10 / num_steps, 0, 0.9)``: an EMA window of about a tenth of the run (at most ~10 steps
    of memory), and no smoothing for runs of 10 steps or fewer, where an EMA would mostly show its lag."""
    return min(0.9, max(0.0, 1.0 - 10.0 / max(num_steps, 1)))


def _component_panels(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The reward components' panels: every registered component's (its registration's order and
    titles), then the mean of any other component a run logged (``reward/<name>/mean``, by name)."""
    registered = list(component_panels())
    known = {key for key, _ in registered} | {c.mean_key for c in REWARD_COMPONENTS.values()}
    logged = {
        key
        for row in rows
        for key in row
        if key.startswith("reward/") and key.endswith("/mean") and key.count("/") == 2
    }
    others = [(key, f"Reward: {key.split('/')[1]}") for key in sorted(logged - known)]
    return [*registered, *others]


def panel_keys(runs: Sequence[Sequence[dict[str, Any]]]) -> list[tuple[str, str]]:
    """``[(key, title)]`` of the panels these runs' metrics fill, in display order."""
    rows = [row for run in runs for row in run]
    present = {key for row in rows for key, value in row.items() if isinstance(value, int | float)}
    panels = []
    for key, title in PANELS:
        if key in present:
            panels.append((key, title))
        if key == "reward/mean":
            panels += [(c, title) for c, title in _component_panels(rows) if c in present]
    return panels


def _labels(run_dirs: Sequence[Path]) -> list[str]:
    labels = [run_label(d) for d in run_dirs]
    if len(set(labels)) < len(labels):
        labels = [run_label(d, with_seed=True) for d in run_dirs]
    if len(set(labels)) < len(labels):
        labels = [f"{label} [{d.name}]" for label, d in zip(labels, run_dirs, strict=True)]
    return labels


#: Line styles, one per ten lines: the 11th line takes the first colour again, dashed.
_LINESTYLES = ("-", "--", ":", "-.")


def line_style(index: int) -> dict[str, str]:
    """Colour and line style of the ``index``-th line of a figure: matplotlib's ten default colours,
    then the same colours dashed, dotted, dash-dotted, so up to 40 lines are told apart (a study has
    12 configurations; colour alone repeated after 10)."""
    return {"color": f"C{index % 10}", "linestyle": _LINESTYLES[(index // 10) % len(_LINESTYLES)]}


def _panel_grid(
    panels: int, entries: int, *, max_cols: int, size: tuple[float, float], pad: float
) -> tuple[Figure, Any]:
    """A figure of ``panels`` axes (at most ``max_cols`` a row, ``size`` inches each) with room below
    for a legend of ``entries`` lines, three a row; returns the figure and its axes, flattened."""
    ncols = min(max_cols, panels)
    nrows = math.ceil(panels / ncols)
    width, height = size
    figure = Figure(
        figsize=(width * ncols, height * nrows + pad + 0.25 * math.ceil(entries / 3)), layout="constrained"
    )
    return figure, figure.subplots(nrows, ncols, squeeze=False).ravel()


def _save(figure: Figure, path: Path, fmt: str) -> None:
    """Render ``figure`` as ``fmt`` and write it to ``path`` all or nothing."""
    rendered = io.BytesIO()
    figure.savefig(rendered, format=fmt, dpi=150, bbox_inches="tight")
    atomic_write_bytes(path, rendered.getvalue())


def plot_runs(
    run_dirs: Sequence[str | os.PathLike],
    output: str | os.PathLike | None = None,
    *,
    labels: Sequence[str] | None = None,
    smoothing: float | None = None,
    title: str | None = None,
) -> Figure:
    """Draw the training dynamics of ``run_dirs`` and, given ``output``, write ``<stem>.png`` and ``<stem>.svg``.

    Args:
        run_dirs: run directories, each with ``metrics.jsonl`` (``config.yaml`` gives the label).
        output: ``FILE.png`` or ``FILE.svg`` (both are written, atomically); any other name is taken as
            the stem (``dyn`` -> ``dyn.png`` + ``dyn.svg``).
        labels: one legend label per run (default: method and weights from ``config.yaml``).
        smoothing: EMA weight of the bold lines in ``[0, 1)`` (0: none). Default: :func:`auto_smoothing` of
            the longest run — none for a few steps, up to 0.9 for long runs.
        title: figure title.

    Returns:
        The matplotlib :class:`~matplotlib.figure.Figure` (one axes per panel; see the module docstring).
    """
    run_dirs = [Path(d) for d in run_dirs]
    if not run_dirs:
        raise ValueError("plot_runs needs at least one run directory")
    runs = [read_metrics(d) for d in run_dirs]
    for run_dir, rows in zip(run_dirs, runs, strict=True):
        if not rows:
            raise ValueError(f"{run_dir / 'metrics.jsonl'} has no rows yet: nothing to plot")
    if labels is None:
        labels = _labels(run_dirs)
    elif len(labels) != len(run_dirs):
        raise ValueError(f"got {len(labels)} labels for {len(run_dirs)} runs")
    if smoothing is None:
        smoothing = auto_smoothing(max(len(rows) for rows in runs))
    panels = panel_keys(runs)
    if not panels:
        raise ValueError(f"none of the runs logged a plotted key ({', '.join(k for k, _ in PANELS)})")

    figure, axes = _panel_grid(len(panels), len(run_dirs), max_cols=4, size=(4.2, 3.0), pad=0.4)
    handles: dict[int, Any] = {}  # run index -> its first smoothed line (the legend entry)
    for axis, (key, panel_title) in zip(axes, panels, strict=False):
        for run_index, (rows, label) in enumerate(zip(runs, labels, strict=True)):
            style = line_style(run_index)
            points = [(row["step"], row.get(key)) for row in rows if "step" in row]
            values = [
                v if isinstance(v, int | float) and not isinstance(v, bool) else None for _, v in points
            ]
            if all(v is None for v in values):
                continue
            steps = np.array([s for s, _ in points], dtype=float)
            raw = np.array([np.nan if v is None else v for v in values], dtype=float)
            smooth = ema(values, smoothing)
            keep = ~np.isnan(raw)
            axis.plot(
                steps[keep],
                raw[keep],
                color=style["color"],
                alpha=0.25,
                linewidth=0.8,
                label=f"{RAW_PREFIX}{label}",
            )
            sparse = key.startswith("val/")  # validation: only the steps that validated have a value
            (line,) = axis.plot(
                steps[keep],
                smooth[keep],
                **style,
                linewidth=1.6,
                label=label,
                marker="o" if sparse else None,
                markersize=3,
            )
            handles.setdefault(run_index, line)
        axis.set_title(panel_title, fontsize=10)
        axis.set_xlabel("step")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.ticklabel_format(axis="y", useOffset=False)
        axis.grid(alpha=0.3)
    for axis in axes[len(panels) :]:
        axis.set_visible(False)
    legend = [handles[index] for index in sorted(handles)]
    figure.legend(
        handles=legend, loc="outside lower center", ncols=min(3, len(legend)), fontsize=9, frameon=False
    )
    if title:
        figure.suptitle(title)

    if output is not None:
        output = Path(output)
        if output.suffix.lower() in (".png", ".svg"):
            output = output.with_suffix("")  # FILE.png -> FILE.png + FILE.svg; any other name is a stem
        output.parent.mkdir(parents=True, exist_ok=True)
        _save(figure, output.with_name(output.name + ".png"), "png")
        _save(figure, output.with_name(output.name + ".svg"), "svg")
    return figure


#: The panels of :func:`plot_seed_bands` (a study's dynamics): the metrics this library logs, each drawn
#: when a run logged it (generic: no study's claim is among them; a study's claims file draws its bands).
BAND_PANELS: tuple[tuple[str, str], ...] = (
    ("entropy/rollout", "Entropy (rollout, nats/token)"),
    # derived per seed (its H_0 is its own), with 1 (H_0) drawn
    ("entropy/rollout_over_h0", "Entropy ÷ the run's H_0 (r_t)"),
    ("reward/mean", "Reward"),
    ("completion/mean_length", "Response length (tokens)"),
    # eapo.run_dir.cap_share: completions/stopped_by_cap
    (CAP_SHARE_KEY, "Share cut at the length cap"),
    ("eapo/w_pos", "w+ (positive weight)"),
    # the registered entropy controls' own actuators (eapo.core.ENTROPY_CONTROLS)
    *actuator_panels(),
)


#: The derived panel's key: each row's ``entropy/rollout`` over its run's ``eapo/H0``.
RATIO_KEY = "entropy/rollout_over_h0"


def with_entropy_ratio(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with :data:`RATIO_KEY` added: rollout entropy ÷ the run's ``H_0`` (its first logged
    ``eapo/H0``). Seeds start at different entropies, so a band over seeds is read on this ratio."""
    h0 = next((row["eapo/H0"] for row in rows if isinstance(row.get("eapo/H0"), int | float)), None)
    if not h0:
        return list(rows)
    return [
        row | {RATIO_KEY: row["entropy/rollout"] / h0}
        if isinstance(row.get("entropy/rollout"), int | float)
        else row
        for row in rows
    ]


def seed_band(
    seeds: Sequence[Sequence[dict[str, Any]]], key: str, smoothing: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One configuration's band over its seeds: ``(steps, mean, low, high)`` of ``key``.

    Each seed's values are smoothed (:func:`ema`) first; at each step logged by any seed, ``mean`` is
    the mean over the seeds that logged it and ``low`` / ``high`` their minimum / maximum (the spread
    across seeds; one seed: low = high = mean).
    """
    by_step: dict[int, list[float]] = {}
    for rows in seeds:
        points = [(row["step"], row.get(key)) for row in rows if "step" in row]
        values = [v if isinstance(v, int | float) and not isinstance(v, bool) else None for _, v in points]
        smooth = ema(values, smoothing)
        for (step, _), value in zip(points, smooth, strict=True):
            if not math.isnan(value):
                by_step.setdefault(int(step), []).append(float(value))
    steps = np.array(sorted(by_step), dtype=float)
    mean = np.array([np.mean(by_step[int(s)]) for s in steps])
    low = np.array([np.min(by_step[int(s)]) for s in steps])
    high = np.array([np.max(by_step[int(s)]) for s in steps])
    return steps, mean, low, high


def _band_rows(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """A seed's ``metrics.jsonl`` rows, each step's cap share checked (:func:`eapo.run_dir.cap_share`: a run
    written before eapo logged it is an error, not a missing panel)."""
    rows = read_metrics(run_dir)
    path = Path(run_dir) / METRICS_FILE
    for row in rows:
        cap_share(row, path)
    return rows


def plot_seed_bands(
    groups: Mapping[str, Sequence[str | os.PathLike]],
    output: str | os.PathLike | None = None,
    *,
    smoothing: float | None = None,
    title: str | None = None,
    bands: Mapping[str, Sequence[float]] | None = None,
) -> Figure:
    """A study's training dynamics: per configuration the mean over its seeds (a line) and the spread
    across them (a band from the lowest to the highest seed), in the panels of :data:`BAND_PANELS`.

    Args:
        groups: ``{label: [run directory of each seed]}``.
        output: ``FILE.png`` (``FILE.svg`` too), as :func:`plot_runs`.
        smoothing: EMA weight applied to each seed before the band (default :func:`auto_smoothing`).
        bands: per panel key, values drawn as dotted lines: the bounds a study's rules use (its claims
            file's ``plot.bands``, :func:`eapo.study.run.plot_bands`), e.g. ``{RATIO_KEY: (0.9, 1.1)}``.
    """
    runs = {
        label: [with_entropy_ratio(_band_rows(d)) for d in dirs] for label, dirs in groups.items() if dirs
    }
    runs = {label: [rows for rows in seeds if rows] for label, seeds in runs.items()}
    runs = {label: seeds for label, seeds in runs.items() if seeds}
    if not runs:
        raise ValueError("plot_seed_bands needs at least one run directory with metrics")
    longest = max(len(rows) for seeds in runs.values() for rows in seeds)
    if smoothing is None:
        smoothing = auto_smoothing(longest)
    panels = [
        (key, panel_title)
        for key, panel_title in BAND_PANELS
        if any(key in row for seeds in runs.values() for rows in seeds for row in rows)
    ]
    if not panels:
        raise ValueError(f"none of the runs logged a plotted key ({', '.join(k for k, _ in BAND_PANELS)})")
    figure, axes = _panel_grid(len(panels), len(runs), max_cols=3, size=(4.6, 3.2), pad=0.5)
    handles: dict[str, Any] = {}
    for axis, (key, panel_title) in zip(axes, panels, strict=False):
        for index, (label, seeds) in enumerate(runs.items()):
            steps, mean, low, high = seed_band(seeds, key, smoothing)
            if not steps.size:
                continue
            style = line_style(index)
            axis.fill_between(steps, low, high, color=style["color"], alpha=0.2, linewidth=0)
            (line,) = axis.plot(steps, mean, **style, linewidth=1.6, label=f"{label} ({len(seeds)} seeds)")
            handles.setdefault(label, line)
        if key == RATIO_KEY:  # H_0
            axis.axhline(1.0, color="black", linewidth=0.8)
        for bound in (bands or {}).get(key, ()):  # the bounds the study's rules read
            axis.axhline(bound, color="black", linewidth=0.6, linestyle=":")
        axis.set_title(panel_title, fontsize=10)
        axis.set_xlabel("step")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.ticklabel_format(axis="y", useOffset=False)
        axis.grid(alpha=0.3)
    for axis in axes[len(panels) :]:
        axis.set_visible(False)
    figure.legend(
        handles=list(handles.values()),
        loc="outside lower center",
        ncols=min(3, len(handles)),
        fontsize=9,
        frameon=False,
    )
    figure.suptitle(
        (title + "\n" if title else "")
        + "line: mean over seeds; band: lowest to highest seed"
        + (f" (each seed EMA-smoothed, {smoothing:.2f})" if smoothing else ""),
        fontsize=10,
    )
    if output is not None:
        output = Path(output)
        if output.suffix.lower() in (".png", ".svg"):
            output = output.with_suffix("")
        output.parent.mkdir(parents=True, exist_ok=True)
        _save(figure, output.with_name(output.name + ".png"), "png")
        _save(figure, output.with_name(output.name + ".svg"), "svg")
    return figure
