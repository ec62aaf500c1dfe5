"""``eapo sweep``: train every (method, weights, seed) configuration, evaluate each, and write the
EAPO paper's comparison and sensitivity tables and the overlaid training-dynamics figure.

Grid semantics (``--grid KEY=V1,V2,...``, repeatable; values are floats):

* ``w_pos`` / ``w_neg`` apply to ``w_reinforce`` — the paper's fixed asymmetric weights (its
  "Performance under different positive/negative reward weight configurations" and the W-REINFORCE
  rows of "Sensitivity"). GRPO, PSR and NSR *are* particular fixed weights, so a grid does not vary them.
* ``w0`` / ``w_min`` / ``w_max`` apply to ``eapo`` (the EAPO rows of "Sensitivity").
* ``METHOD.KEY=...`` targets one method explicitly (any key it accepts, e.g. ``eapo.w_neg=0.5,1``).
* Several axes for the same method form a Cartesian product. The paper's fixed-weight table is two
  one-dimensional sweeps (w+ varied at w−=1, w− varied at w+=1); run them as two ``eapo sweep``
  invocations into the same ``--output-dir`` (``--methods grpo,psr,nsr,w_reinforce --grid
  w_reinforce.w_pos=1 --grid w_neg=0.05,0.1,0.2,5``, then ``--methods w_reinforce --grid
  w_pos=0.05,0.1,0.2,5``): the tables cover every run recorded there.

So ``--methods grpo,psr,nsr,w_reinforce,eapo --grid w_pos=0.05,0.1,0.2 --grid w0=0.05,0.1,0.2`` is the
paper's main comparison plus its sensitivity study (9 runs per seed).

Layout of ``--output-dir``::

    sweep.json                 the manifest: every run, its overrides, status and error (merged across invocations)
    base.yaml, base/           the base config (with the pass-through overrides) and the base model's evaluation
    runs/<name>/               one run directory per configuration (eapo train), with eval/ (eapo eval)
    logs/<name>.{train,eval}.log
    comparison.md / .csv       the paper's "Performance comparison" table (base model first; Avg over
                               Rouge-L, Reranker, RL@k, RR@k), with a judge its LAAJ layout
                               (Avg over Rouge-L, Reranker, LAAJ), and the strict table (an answer
                               without its <advice> block scores 0; avg_strict)
    sensitivity.md / .csv      per method and varied weight: one row per value and Range = max − min
                               (Rouge-L, Reranker; ``--side-by-side DIR`` adds another sweep's dataset)
    fixed_weights.md / .csv    PSR, NSR, GRPO and the W-REINFORCE blocks with w+, w− and w+/w−
    dynamics.png / .svg        the overlaid training dynamics

Weights that the base config or a pass-through override sets but a method does not take are dropped
for that method (``configs/demo.yaml`` sets EAPO's ``w0``; a ``grpo`` run gets ``algorithm.w0=null``);
an override that no method in ``--methods`` takes is an error.

Each run is a subprocess (``python -m eapo.cli train`` / ``eval``): a failed run is recorded with the
tail of its log and the sweep moves on; the command exits non-zero at the end if any run failed. A
run whose ``final/`` and ``eval/results.json`` exist is skipped; a run directory left by a crash is
resumed (``eapo train --resume``); a run directory trained with a different configuration stops the
sweep before anything starts (naming the differing keys).

The package reads in pipeline order: :mod:`eapo.sweep.plan` (the grid and its configurations),
:mod:`eapo.sweep.manifest` (``sweep.json``), :mod:`eapo.sweep.run` (training and evaluating each
configuration), :mod:`eapo.sweep.tables` (the tables and the figure).
"""

from eapo.sweep.manifest import MANIFEST, read_json, update_manifest
from eapo.sweep.plan import (
    GRID_KEYS,
    WEIGHT_KEYS,
    GridAxis,
    SweepError,
    SweepRun,
    grid_targets,
    parse_grid,
    plan_runs,
)
from eapo.sweep.run import RunFailed, Runner, SubprocessRunner, SweepReport, run_sweep
from eapo.sweep.tables import (
    FIXED_ROWS,
    Entry,
    collect_entries,
    comparison_table,
    fixed_weight_table,
    paper_weight_columns,
    sensitivity_blocks,
    sensitivity_table,
    weight_ratio,
    write_reports,
)

__all__ = [
    # plan
    "GRID_KEYS",
    "grid_targets",
    "WEIGHT_KEYS",
    "GridAxis",
    "SweepRun",
    "SweepError",
    "parse_grid",
    "plan_runs",
    # manifest
    "MANIFEST",
    "read_json",
    "update_manifest",
    # run
    "RunFailed",
    "Runner",
    "SubprocessRunner",
    "SweepReport",
    "run_sweep",
    # tables
    "paper_weight_columns",
    "FIXED_ROWS",
    "Entry",
    "collect_entries",
    "comparison_table",
    "sensitivity_blocks",
    "sensitivity_table",
    "fixed_weight_table",
    "weight_ratio",
    "write_reports",
]
