"""``eapo study``: a comparison of configurations in one command, and a verdict on each claim of a study.

The study trains the methods of ``study.methods`` (their weights set by ``study.grids``) or the labelled
runs of ``study.runs`` from the same base model and seed(s), evaluates each on a held-out split, and
writes ``claims.md`` / ``claims.json``: for each claim of its claims file (``study.claims``, e.g. the
paper's, ``configs/paper.claims.yaml``), *held*, *did not hold*, *within noise* or *not measured*, with
the numbers and the rule that decided it. A study's claims, their thresholds, the bands its figure draws
and its power analysis's rows are data, beside its config; one engine judges them all.

The package, lowest layer first (each module imports only the ones listed before it):

* :mod:`eapo.study.stats`: the 95% intervals (windows, slopes, Avgs, ratios, differences, the
  Range bootstrap) and the verdict rules that compare them; pure functions over numbers.
* :mod:`eapo.study.roles`: a configuration's role (:func:`run_role`) and what the claims read of its
  runs (:class:`MethodData`).
* :mod:`eapo.study.quantities`: what a claim reads, a registry of statistics (``window``, ``slope``,
  ``avg``, ``ratio``, ``deviation``, ``difference``, ``range``, ...) over the runs.
* :mod:`eapo.study.templates`: the texts of a claims file, templates over a claim's quantities.
* :mod:`eapo.study.claims`: the engine: a registry of comparisons (``lowers``, ``inside``,
  ``above_all``, ...) and of reasons a claim is not measured, the claims file's form, and
  :func:`assess`.
* :mod:`eapo.study.render`: ``claims.md`` (a registry of blocks) and ``claims.json`` of an assessment.
* :mod:`eapo.study.claims_file`: reading and checking a claims file (:func:`load_claims`).
* :mod:`eapo.study.run`: the orchestration: settings, the plan, the sweep runner (skip-if-finished),
  reading the run directories, writing ``claims.md`` / ``claims.json`` and the study's tables.

:mod:`eapo.study.power` (``python -m eapo.study.power DIR --seeds 3``) reads a finished study's
``claims.json`` and says how large a difference each verdict can detect with S seeds; it is not
imported here.
"""

from eapo.study.claims import (
    COMPARISONS,
    REASONS,
    Assessment,
    Claim,
    ClaimsFile,
    assess,
    interval_text,
    register_comparison,
    register_reason,
)
from eapo.study.claims_file import STUDY_DEFAULTS, ClaimsError, load_claims, resolve_claims, study_params
from eapo.study.quantities import STATISTICS, register_statistic
from eapo.study.render import BLOCKS, claims_markdown, claims_payload, register_block
from eapo.study.roles import (
    CLIPPED_KEY,
    ENTROPY_KEY,
    H0_KEY,
    LENGTH_KEY,
    REWARD_KEY,
    SERIES_KEYS,
    MethodData,
    run_role,
)
from eapo.study.run import (
    StudyReport,
    StudySettings,
    claims_params,
    collect_method_data,
    plan_study,
    read_study_config,
    rejudge_study,
    run_study,
    sensitivity_columns,
    study_claims,
    study_runs,
    write_study_tables,
)
from eapo.study.stats import (
    HELD,
    MIN_WINDOW_STEPS,
    NOT_HELD,
    NOT_MEASURED,
    WITHIN_NOISE,
    Interval,
    approach_verdict,
    avg_interval,
    band_verdict,
    below_verdict,
    best_verdict,
    between_verdict,
    change_verdict,
    combine_verdicts,
    deviation_interval,
    difference_interval,
    lower_verdict,
    range_difference_interval,
    ratio_interval,
    slope_interval,
    window_interval,
)

__all__ = [
    # stats
    "HELD",
    "NOT_HELD",
    "WITHIN_NOISE",
    "NOT_MEASURED",
    "MIN_WINDOW_STEPS",
    "Interval",
    "window_interval",
    "slope_interval",
    "avg_interval",
    "ratio_interval",
    "deviation_interval",
    "difference_interval",
    "range_difference_interval",
    "change_verdict",
    "band_verdict",
    "best_verdict",
    "between_verdict",
    "below_verdict",
    "lower_verdict",
    "approach_verdict",
    "combine_verdicts",
    # roles
    "ENTROPY_KEY",
    "LENGTH_KEY",
    "REWARD_KEY",
    "H0_KEY",
    "CLIPPED_KEY",
    "SERIES_KEYS",
    "MethodData",
    "run_role",
    # the engine
    "STATISTICS",
    "COMPARISONS",
    "REASONS",
    "BLOCKS",
    "register_statistic",
    "register_comparison",
    "register_reason",
    "register_block",
    "Claim",
    "ClaimsFile",
    "Assessment",
    "ClaimsError",
    "load_claims",
    "resolve_claims",
    "study_params",
    "STUDY_DEFAULTS",
    "assess",
    "interval_text",
    "claims_markdown",
    "claims_payload",
    # run
    "sensitivity_columns",
    "StudySettings",
    "StudyReport",
    "read_study_config",
    "study_claims",
    "plan_study",
    "study_runs",
    "claims_params",
    "collect_method_data",
    "write_study_tables",
    "run_study",
    "rejudge_study",
]
