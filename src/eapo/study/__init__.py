"""``eapo study``: the EAPO paper's comparison in one command, and a verdict on each of its claims.

The study trains GRPO, PSR, NSR, W-REINFORCE (w+ = 0.1) and EAPO (w0 = 0.2) — or the labelled runs of
``study.runs`` — from the same base model and seed(s), evaluates each on a held-out split, and writes
``claims.md`` / ``claims.json``: for each claim of the paper, *held*, *did not hold*, *within noise* or
*not measured*, with the numbers and the rule that decided it.

The package, lowest layer first (each module imports only the ones listed before it):

* :mod:`eapo.study.stats`: the 95% intervals (windows, slopes, Avgs, ratios, differences, the
  Range bootstrap) and the verdict rules that compare them; pure functions over numbers.
* :mod:`eapo.study.claims`: the first eight claims (PSR lowers entropy, ..., NSR's reward rises
  faster), what they read per configuration (:class:`MethodData`) and ``claims.md``'s first part.
* :mod:`eapo.study.paper`: the paper's own sentences, each with a rule fixed before the data, and
  ``claims.md``'s second part.
* :mod:`eapo.study.controls`: the controls study's seven claims (``study.claims: controls``; does
  EAPO's controller correct, do closed-loop controls hold), from ``docs/results/study-cpu-controls/plan.md``.
* :mod:`eapo.study.run`: the orchestration: settings, the plan, the sweep runner (skip-if-finished),
  reading the run directories, writing ``claims.md`` / ``claims.json`` and the study's tables.

:mod:`eapo.study.power` (``python -m eapo.study.power DIR --seeds 3``) reads a finished study's
``claims.json`` and says how large a difference each verdict can detect with S seeds; it is not
imported here.
"""

from eapo.study.claims import (
    CLIPPED_KEY,
    CUT_SHARE,
    ENTROPY_BAND,
    ENTROPY_KEY,
    H0_KEY,
    LENGTH_KEY,
    REWARD_KEY,
    STUDY_METHODS,
    STUDY_WEIGHTS,
    VERDICT_RULES,
    Claim,
    MethodData,
    assess_claims,
    claims_markdown,
    run_role,
)
from eapo.study.controls import (
    CONTROL_ROLES,
    CONTROL_RULES,
    EAPO_W0,
    assess_control_claims,
    control_claims_markdown,
)
from eapo.study.paper import (
    APPROACH_MARGIN,
    COMPARATORS,
    EAPO_SENSITIVITY,
    FIXED_WEIGHT_METHODS,
    PAPER_RULES,
    W_REINFORCE_SENSITIVITY,
    PaperClaim,
    assess_paper_claims,
    paper_claims_markdown,
)
from eapo.study.run import (
    STUDY_GRIDS,
    StudyReport,
    StudySettings,
    collect_method_data,
    plan_study,
    read_study_config,
    run_study,
    sensitivity_columns,
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
    # claims
    "STUDY_METHODS",
    "STUDY_WEIGHTS",
    "ENTROPY_BAND",
    "CUT_SHARE",
    "ENTROPY_KEY",
    "LENGTH_KEY",
    "REWARD_KEY",
    "H0_KEY",
    "CLIPPED_KEY",
    "VERDICT_RULES",
    "Claim",
    "MethodData",
    "run_role",
    "assess_claims",
    "claims_markdown",
    # paper
    "APPROACH_MARGIN",
    "COMPARATORS",
    "EAPO_SENSITIVITY",
    "FIXED_WEIGHT_METHODS",
    "PAPER_RULES",
    "W_REINFORCE_SENSITIVITY",
    "PaperClaim",
    "assess_paper_claims",
    "paper_claims_markdown",
    "CONTROL_ROLES",
    "CONTROL_RULES",
    "EAPO_W0",
    "assess_control_claims",
    "control_claims_markdown",
    # run
    "STUDY_GRIDS",
    "sensitivity_columns",
    "StudySettings",
    "StudyReport",
    "read_study_config",
    "plan_study",
    "study_runs",
    "collect_method_data",
    "write_study_tables",
    "run_study",
]
