"""``eapo plot`` / ``eapo.plot.plot_runs`` on hand-written run directories."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from eapo.cli import app
from eapo.plot import (
    RATIO_KEY,
    RAW_PREFIX,
    auto_smoothing,
    ema,
    line_style,
    plot_runs,
    plot_seed_bands,
    with_entropy_ratio,
)


def make_run(
    root: Path, name: str, method: str, steps: int = 6, components=("format", "rouge_l"), **weights
) -> Path:
    """A run directory with a config.yaml and a hand-built metrics.jsonl (no training)."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    config = {"algorithm": {"method": method, **weights}, "train": {"seed": 0}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    rows = []
    for step in range(1, steps + 1):
        row = {
            "step": step,
            "entropy/rollout": 1.0 + 0.1 * step,
            "eapo/H0": 1.1,
            "eapo/w_pos": 0.2 * (1.0 + 0.1 * step) / 1.1,
            "eapo/w_neg": 1.0,
            "eapo/frac_positive": 0.5,
            "reward/mean": 0.1 * step,
            "completion/mean_length": 20.0 + step,
            "kl": 0.01 * step,
            "loss": 0.5,
            "learning_rate": 1e-6,
            "clip_frac": 0.0,
        }
        for index, component in enumerate(components):
            row[f"reward/{component}/mean"] = 0.05 * step + index
        rows.append(row)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return run_dir


def labelled_lines(axis):
    return [line for line in axis.get_lines() if not line.get_label().startswith("_")]


def test_one_line_per_run_and_panel_labelled_by_method_and_weights(tmp_path):
    runs = [
        make_run(tmp_path, "a", "eapo", w0=0.1),
        make_run(tmp_path, "b", "w_reinforce", w_pos=0.2),
        make_run(tmp_path, "c", "grpo", components=("format",)),
    ]
    figure = plot_runs(runs, tmp_path / "out" / "dyn.png")
    axes = [axis for axis in figure.axes if axis.get_visible()]
    titles = [axis.get_title() for axis in axes]
    assert titles == [
        "Entropy (rollout, nats/token)",
        "Reward",
        "Reward: format",
        "Reward: rouge_l",
        "Response length (tokens)",
        "w+ (positive weight)",
        "KL to reference",
        "Clip fraction",
    ]
    expected = ["EAPO (w0=0.1)", "W-REINFORCE (w+=0.2, w−=1)", "GRPO"]
    for axis in axes:
        labels = [line.get_label() for line in labelled_lines(axis)]
        if axis.get_title() == "Reward: rouge_l":
            assert labels == expected[:2]  # the GRPO run logged no rouge_l component
        else:
            assert labels == expected
        raw = [line for line in axis.get_lines() if line.get_label().startswith(RAW_PREFIX)]
        assert len(raw) == len(labels) and all(line.get_alpha() < 0.5 for line in raw)
    # both formats, same stem, non-empty; the PNG is a real PNG
    png, svg = tmp_path / "out" / "dyn.png", tmp_path / "out" / "dyn.svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert svg.read_text(encoding="utf-8").lstrip().startswith("<?xml") and "<svg" in svg.read_text(
        encoding="utf-8"
    )
    legend_texts = [text.get_text() for text in figure.legends[0].get_texts()]
    assert legend_texts == expected


def test_lines_carry_the_raw_values_and_their_ema(tmp_path):
    run = make_run(tmp_path, "a", "eapo")
    figure = plot_runs([run], smoothing=0.5)
    entropy_axis = figure.axes[0]
    raw, smooth = entropy_axis.get_lines()
    np.testing.assert_allclose(raw.get_xdata(), [1, 2, 3, 4, 5, 6])
    np.testing.assert_allclose(raw.get_ydata(), [1.1, 1.2, 1.3, 1.4, 1.5, 1.6])
    # debiased EMA, s = 0.5: m1 = 0.5·1.1 = 0.55 -> 0.55 / (1 - 0.5) = 1.1;
    # m2 = 0.5·0.55 + 0.5·1.2 = 0.875 -> 0.875 / (1 - 0.25) = 1.16667
    assert smooth.get_ydata()[0] == pytest.approx(1.1, abs=1e-12)
    assert smooth.get_ydata()[1] == pytest.approx(0.875 / 0.75, abs=1e-12)


def test_auto_smoothing_follows_run_length(tmp_path):
    assert auto_smoothing(2) == 0.0 and auto_smoothing(10) == 0.0
    assert auto_smoothing(20) == pytest.approx(0.5) and auto_smoothing(1000) == 0.9
    figure = plot_runs([make_run(tmp_path, "a", "eapo", steps=6)])  # short run: bold line = raw values
    raw, smooth = figure.axes[0].get_lines()
    np.testing.assert_allclose(smooth.get_ydata(), raw.get_ydata())


def test_ema_skips_missing_values():
    out = ema([1.0, None, 3.0, float("nan")], smoothing=0.0)
    assert out[0] == 1.0 and math.isnan(out[1]) and out[2] == 3.0 and math.isnan(out[3])
    out = ema([2.0, None, 4.0], smoothing=0.5)
    assert out[2] == pytest.approx((0.5 * (0.5 * 2.0) + 0.5 * 4.0) / 0.75)
    with pytest.raises(ValueError, match="smoothing"):
        ema([1.0], smoothing=1.0)


def test_same_method_runs_are_told_apart_by_seed(tmp_path):
    a = make_run(tmp_path, "a", "grpo")
    b = make_run(tmp_path, "b", "grpo")
    (b / "config.yaml").write_text(yaml.safe_dump({"algorithm": {"method": "grpo"}, "train": {"seed": 1}}))
    figure = plot_runs([a, b])
    assert [line.get_label() for line in labelled_lines(figure.axes[0])] == ["GRPO seed 0", "GRPO seed 1"]


def test_cli_writes_png_and_svg(tmp_path):
    runs = [make_run(tmp_path, "a", "eapo"), make_run(tmp_path, "b", "nsr")]
    result = CliRunner().invoke(app, ["plot", *map(str, runs), "--output", str(tmp_path / "fig.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "fig.png").stat().st_size > 10_000 and (tmp_path / "fig.svg").stat().st_size > 10_000


def test_cli_names_a_missing_metrics_file(tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(app, ["plot", str(tmp_path / "empty"), "--output", str(tmp_path / "x.png")])
    assert result.exit_code == 1
    assert "metrics.jsonl" in result.output and "does not exist" in result.output


def test_validation_panel_appears_when_a_run_logged_val_reward(tmp_path):
    """val/reward (every train.eval_steps steps) gets its own panel after the reward components; the
    steps without validation leave gaps, not zeros, and the points are marked."""
    validated = make_run(tmp_path, "a", "eapo")
    rows = [json.loads(line) for line in (validated / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        if row["step"] % 2 == 0:
            row["val/reward"] = 0.1 * row["step"]
    (validated / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    plain = make_run(tmp_path, "b", "grpo")

    titles = [axis.get_title() for axis in plot_runs([plain]).axes if axis.get_visible()]
    assert "Validation reward (dev subset)" not in titles

    figure = plot_runs([validated, plain], smoothing=0.0)
    axes = {axis.get_title(): axis for axis in figure.axes if axis.get_visible()}
    titles = list(axes)
    assert titles.index("Validation reward (dev subset)") == titles.index("Reward: rouge_l") + 1
    panel = axes["Validation reward (dev subset)"]
    (line,) = labelled_lines(panel)  # the run without validation has no line here
    assert line.get_label().startswith("EAPO")
    np.testing.assert_allclose(line.get_xdata(), [2, 4, 6])
    np.testing.assert_allclose(line.get_ydata(), [0.2, 0.4, 0.6])
    assert line.get_marker() == "o"
    assert labelled_lines(axes["Reward"])[0].get_marker() in ("None", None, "")


def test_entropy_control_metrics_get_their_panels_only_where_logged():
    from eapo.plot import panel_keys

    grpo = [{"step": 1, "entropy/rollout": 3.0}]
    clip_cov = [{"step": 1, "entropy/rollout": 2.9, "entropy_control/cov_frac": 2e-4}]
    adaptive = [{"step": 1, "entropy/rollout": 3.1, "entropy_control/coef": 0.005}]
    assert [key for key, _ in panel_keys([grpo])] == ["entropy/rollout"]
    assert panel_keys([grpo, clip_cov, adaptive]) == [
        ("entropy/rollout", "Entropy (rollout, nats/token)"),
        ("entropy_control/coef", "Entropy coefficient (applied)"),
        ("entropy_control/cov_frac", "Clip-Cov / KL-Cov selected (share of tokens)"),
    ]


def test_twelve_configurations_get_twelve_different_lines(tmp_path):
    """A study draws 12 configurations; ten colours alone drew PSR and clip-higher alike."""
    styles = [(style["color"], style["linestyle"]) for style in map(line_style, range(40))]
    assert len(set(styles)) == 40
    assert styles[0] == ("C0", "-") and styles[10] == ("C0", "--") and styles[11] == ("C1", "--")

    groups = {f"m{i}": [make_run(tmp_path, f"m{i}-seed0", "grpo", steps=4)] for i in range(12)}
    figure = plot_seed_bands(groups)
    drawn = [(line.get_color(), line.get_linestyle()) for line in labelled_lines(figure.axes[0])]
    assert len(drawn) == 12 and len(set(drawn)) == 12
    assert drawn[1] == ("C1", "-") and drawn[11] == ("C1", "--")

    figure = plot_runs([path for dirs in groups.values() for path in dirs])
    drawn = [(line.get_color(), line.get_linestyle()) for line in labelled_lines(figure.axes[0])]
    assert len(drawn) == 12 and len(set(drawn)) == 12


def test_seed_bands_draw_the_controls_actuators_only_where_logged(tmp_path):
    """The controls study's figure: EntroPIC's α and the adaptive coefficient get a panel each, with a
    line for the configuration that logged it only."""
    grpo = make_run(tmp_path, "grpo-seed0", "grpo")
    entropic = make_run(tmp_path, "entropic-seed0", "entropic")
    metrics = entropic / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps(r | {"entropic/alpha": 0.01 * r["step"]}) + "\n" for r in rows))
    figure = plot_seed_bands({"GRPO": [grpo], "EntroPIC": [entropic]})
    titles = [axis.get_title() for axis in figure.axes if axis.get_visible()]
    assert "EntroPIC α (applied)" in titles and "Entropy coefficient (applied)" not in titles
    (axis,) = [axis for axis in figure.axes if axis.get_title() == "EntroPIC α (applied)"]
    (line,) = labelled_lines(axis)
    assert line.get_label() == "EntroPIC (1 seeds)"
    assert line.get_ydata()[-1] == pytest.approx(0.06, rel=0.3)  # smoothed, near the last value


def test_seed_bands_draw_entropy_over_each_runs_own_h0(tmp_path):
    """Seeds start at different entropies (H_0 1.01-1.19 nats in the controls study), so the band the
    claims read is r_t = entropy ÷ the run's own H_0, with 1 drawn and the bounds its claims file names."""
    low = make_run(tmp_path, "eapo-seed0", "eapo", steps=4)  # entropy 1.1..1.4, H_0 1.1
    high = make_run(tmp_path, "eapo-seed1", "eapo", steps=4)
    metrics = high / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text(
        "".join(
            json.dumps(r | {"entropy/rollout": 2 * r["entropy/rollout"], "eapo/H0": 2.2}) + "\n" for r in rows
        )
    )
    figure = plot_seed_bands({"EAPO": [low, high]}, smoothing=0.0, bands={RATIO_KEY: (0.9, 1.1)})
    (axis,) = [a for a in figure.axes if a.get_title() == "Entropy ÷ the run's H_0 (r_t)"]
    (line,) = labelled_lines(axis)
    expected = [(1.0 + 0.1 * step) / 1.1 for step in range(1, 5)]
    assert list(line.get_ydata()) == pytest.approx(expected)  # both seeds' r agree: the band has no width
    references = sorted(
        round(ref.get_ydata()[0], 2) for ref in axis.get_lines() if ref not in labelled_lines(axis)
    )
    assert references == [0.9, 1.0, 1.1]
    # no bands given (a study whose claims file draws none): H_0 alone
    figure = plot_seed_bands({"EAPO": [low, high]}, smoothing=0.0)
    (axis,) = [a for a in figure.axes if a.get_title() == "Entropy ÷ the run's H_0 (r_t)"]
    assert [ref.get_ydata()[0] for ref in axis.get_lines() if ref not in labelled_lines(axis)] == [1.0]
    (raw,) = labelled_lines(figure.axes[0])
    assert list(raw.get_ydata()) == pytest.approx([1.5 * (1.0 + 0.1 * step) for step in range(1, 5)])
    # a run that logged no H_0 gets no ratio
    assert with_entropy_ratio([{"step": 1, "entropy/rollout": 2.0}]) == [{"step": 1, "entropy/rollout": 2.0}]
