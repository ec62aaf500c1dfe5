"""The two engines side by side: one eapo config trained by TRL and by verl, per step.

    .venv/bin/python docs/results/engine-parity/make_parity.py TRL_RUN VERL_RUN [--out docs/results/engine-parity]

Reads each run directory's ``metrics.jsonl`` (the same keys on both engines) and writes ``parity.md``
(H_0, then per step H_t, w+, reward and length on each engine) and ``dynamics.png`` / ``.svg``
(``eapo plot``'s panels, one line per engine). It computes nothing else: what differs and why is in
the README beside them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

KEYS = (
    ("entropy/rollout", "H_t"),
    ("eapo/w_pos", "w+"),
    ("reward/mean", "reward"),
    ("completion/mean_length", "length"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trl", type=Path)
    parser.add_argument("verl", type=Path)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    options = parser.parse_args(argv)

    from eapo.plot import plot_runs
    from eapo.run_dir import read_metrics

    runs = {"TRL": read_metrics(options.trl), "verl": read_metrics(options.verl)}
    by_step = {engine: {row["step"]: row for row in rows} for engine, rows in runs.items()}
    steps = sorted(set(by_step["TRL"]) | set(by_step["verl"]))
    lines = [
        "# The demo config per step on TRL and verl",
        "",
        f"Written by `make_parity.py` from `{options.trl.name}` (TRL) and `{options.verl.name}` (verl).",
        "",
        "| engine | H_0 (nats/token) |",
        "|---|---|",
    ]
    for engine, rows in by_step.items():
        first = rows[min(rows)]
        lines.append(f"| {engine} | {first.get('eapo/H0', float('nan')):.4f} |")
    lines += ["", "| step | " + " | ".join(f"{name} TRL | {name} verl" for _, name in KEYS) + " |"]
    lines.append("|---|" + "---|---|" * len(KEYS))
    for step in steps:
        cells = []
        for key, _ in KEYS:
            for engine in ("TRL", "verl"):
                value = by_step[engine].get(step, {}).get(key)
                cells.append("–" if value is None else f"{value:.4g}")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "parity.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    plot_runs(
        [options.trl, options.verl],
        options.out / "dynamics.png",
        labels=["TRL", "verl"],
        title="The demo config on each engine",
    )
    print(f"wrote {options.out / 'parity.md'} and {options.out / 'dynamics.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
