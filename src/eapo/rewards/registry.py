"""The registry of reward components: one :class:`RewardComponent` per component carries every view of it.

A component is one module that defines its reward function and registers it with
:func:`register_reward` (verl's ``register_policy_loss`` pattern: the entry carries the behaviour). The
registration holds what any other part of eapo needs to know about the component, so that nothing outside
its module names it:

* **settings** — its options are its class's keyword arguments (``reward.options.<name>``,
  :func:`eapo.rewards.make_reward`), declared once in its signature; ``light`` says they are checked by
  building it when a configuration is loaded; ``default_weight`` is its α in the default
  ``reward.weights``; ``run_options`` completes its options from the rest of a run's configuration
  (the format check's prefix from ``data.response_prefix``, the overlong cap from the rollout's);
* **metrics** — every component logs ``reward/<name>/{mean,std,none_frac}`` (:mod:`eapo.rewards.composite`);
  ``metrics`` documents the keys it logs beyond those;
* **plots** — ``panels``, the ``(metrics.jsonl key, title)`` panels ``eapo plot`` draws for it
  (by default its mean, ``Reward: <name>``); ``eapo summary`` shows the trend of its mean;
* **evaluation** — ``evaluation`` (:class:`EvalScorer`): the scorer ``eapo eval`` runs, its name and
  title there, the table columns its scores fill (:class:`EvalColumn`: how a prompt's k scores make
  the column, which Avg it joins, whether it has a strict variant), the tables it adds
  (:class:`EvalTable`), whether its check gates the strict columns (:class:`StrictGate`) and the
  settings of how it scores that the evaluating commands take as flags (:class:`ScorerSetting`:
  ``--rouge-level``, ``--reranker-backend``).

:mod:`eapo.evaluation` (metrics, report, runner, harness), :mod:`eapo.plot`, :mod:`eapo.summary` and the
``reward`` section of the configuration read these entries; a component registered from any module
(a test's, a user's) is then evaluated, tabled, plotted and summarised like the built-in ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "PER_PROMPT",
    "EvalColumn",
    "EvalTable",
    "StrictGate",
    "ScorerSetting",
    "EvalScorer",
    "RewardComponent",
    "REWARD_COMPONENTS",
    "register_reward",
    "unregister_reward",
    "default_weights",
    "light_components",
    "component_panels",
    "eval_scorers",
    "scorer_component",
    "eval_columns",
    "scorer_settings",
]

#: How a prompt's ``k`` scores make its value in a column: their mean, or the best of them (the paper's
#: RL@8: "the best Rouge-L score among 8 inference samples").
PER_PROMPT: tuple[str, ...] = ("mean", "best")


@dataclass(frozen=True)
class EvalColumn:
    """A column of the evaluation tables that a scorer's per-sample scores fill.

    Attributes:
        key: the metric key in ``results.json`` (``rouge_l``, ``rl_at_k``).
        title: its heading in tables; ``{k}`` is replaced by the samples per prompt (``RL@{k}`` -> ``RL@8``).
        per_prompt: ``"mean"`` or ``"best"`` (:data:`PER_PROMPT`) of a prompt's k scores; the column is
            the mean of that over prompts.
        averages: the Avgs (``avg``, or the key of an :class:`EvalTable`) it is averaged into.
        strict: it has a strict variant ``<key>_strict``, in which a sample that fails the gate's check
            (:class:`StrictGate`) scores 0.
        order: its place among the columns (``results.json``'s keys, the CSV, each table): the paper's
            Rouge-L 1, Reranker 2, RL@k 3, RR@k 4, then LAAJ 5; ties keep registration order.
    """

    key: str
    title: str
    per_prompt: str = "mean"
    averages: tuple[str, ...] = ()
    strict: bool = False
    order: float = 100.0

    def __post_init__(self) -> None:
        if self.per_prompt not in PER_PROMPT:
            raise ValueError(
                f"column {self.key!r}: per_prompt={self.per_prompt!r} is invalid; valid: {', '.join(PER_PROMPT)}"
            )
        if self.key.endswith("_strict"):
            raise ValueError(f"column {self.key!r}: the suffix _strict is the strict variant's; rename it")


@dataclass(frozen=True)
class EvalTable:
    """A table of the evaluation report beside the main one, with its own Avg, shown when one of the
    columns only it has was measured (the LLM-as-a-Judge layout, with LAAJ).

    Attributes:
        avg: its Avg's metric key (``avg_laaj``); the columns whose ``averages`` name it are its columns.
        heading: its Markdown heading (``## With LLM-as-a-Judge``).
        lead: the words before its Avg's footnote (``With LLM-as-a-Judge: ``).
        source: where the Avg comes from, in its footnote (``the paper's per-dataset tables ...``).
    """

    avg: str
    heading: str
    lead: str
    source: str


@dataclass(frozen=True)
class StrictGate:
    """A scorer whose per-sample score of 1 means the answer is there (the format check): in the strict
    columns a sample it scored otherwise scores 0 (:mod:`eapo.evaluation.metrics`).

    Attributes:
        heading: the strict table's Markdown heading.
        note: what the strict table's cells are (under the tables).
        summary_note: the same, in the one line ``eapo summary`` prints under its table.
    """

    heading: str
    note: str
    summary_note: str


@dataclass(frozen=True)
class ScorerSetting:
    """A setting of how a scorer scores in evaluation, one of its component's options, that every command
    that evaluates takes on its command line (``eapo eval``, ``sweep``, ``study``): given, it wins over the
    evaluated run's ``reward.options``.

    Attributes:
        name: its key: the flag ``--<name>`` (``_`` spelt ``-``: ``rouge_level`` -> ``--rouge-level``), the
            key in :class:`eapo.evaluation.EvalSettings` ``scorer_settings`` and in a study config's
            ``study.scorer_settings``. Unique among the registered scorers.
        option: the component option it sets (``level``); the component's default for it is the flag's
            default where the run does not set it.
        help: what it sets and its values, the flag's help (the commands add its default).
        choices: the values it takes (empty: any); another is a usage error.
        real: the values that ask for the scorer itself, not its stand-in: an evaluation whose label for
            the scorer says ``stand-in`` is not reused for them (``reranker_backend``: ``cross-encoder``).
    """

    name: str
    option: str
    help: str
    choices: tuple[str, ...] = ()
    real: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        """Its command-line flag: ``--rouge-level``."""
        return "--" + self.name.replace("_", "-")

    def check(self, value: str) -> None:
        """A ValueError naming the flag when ``value`` is not one of ``choices``."""
        if self.choices and value not in self.choices:
            raise ValueError(f"{self.flag} {value!r} is invalid; valid: {', '.join(self.choices)}")


@dataclass(frozen=True)
class EvalScorer:
    """How ``eapo eval`` runs a component.

    Attributes:
        name: the scorer's name in evaluation (``--scorers``, ``results.json``'s ``labels``); default the
            component's.
        title: its name in the report's tables and notes; default the component's title.
        columns: the table columns its scores fill; without any, the mean of its scores is reported
            beside the tables (``results.json["extra"]``).
        tables: the tables it adds beside the main one.
        default: ``eapo eval`` runs it unless ``--scorers`` says otherwise.
        options: options it always gets in evaluation (LAAJ judges the response: ``target: response``).
        settings: the settings of how it scores that the evaluating commands take as flags
            (:class:`ScorerSetting`: ``rouge_level`` sets ``level``).
        prefix_option: the option that takes the text every evaluated response starts with, unless the
            run set it (the format check's ``prefix``).
        endpoint: it calls the judge's endpoint (``--judge-*``, ``reward.judge``): added when one is given,
            given its settings, and checked before anything is generated.
        gate: its check gates the strict columns (:class:`StrictGate`); at most one scorer has one.
        stand_in_note: when its label says ``stand-in``, the footnote under the tables (its columns are
            marked †); ``stand_in_summary``: the same in ``eapo summary``'s one line.
    """

    name: str = ""
    title: str = ""
    columns: tuple[EvalColumn, ...] = ()
    tables: tuple[EvalTable, ...] = ()
    default: bool = False
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    settings: tuple[ScorerSetting, ...] = ()
    prefix_option: str | None = None
    endpoint: bool = False
    gate: StrictGate | None = None
    stand_in_note: str = ""
    stand_in_summary: str = ""


@dataclass(frozen=True)
class RewardComponent:
    """A reward component, registered whole: its function, settings, metrics, plot panels and evaluation.

    Attributes:
        name: the registry name: the key of ``reward.weights`` / ``reward.options``, and ``<name>`` in its
            metric keys ``reward/<name>/...``.
        build: the reward function's class (or factory); its keyword arguments are the component's options.
        title: its short name in tables and legends (``Rouge-L``).
        help: its range and what it scores, in one line (the docs' table of components).
        light: built without loading a model or opening a client, so a configuration's options for it
            are checked by building it when the configuration is loaded.
        default_weight: its α in the default ``reward.weights`` (0: not in the default composite).
        run_options: ``(run config, options, run directory or None) -> options``: its options completed
            from the rest of a run's configuration (explicit options win), applied when ``reward.weights``
            or ``reward.options`` lists it (:func:`eapo.config.reward_options`).
        metrics: the metric keys it logs beyond ``reward/<name>/{mean,std,none_frac}`` (documentation).
        panels: ``(metrics.jsonl key, title)`` of its ``eapo plot`` panels; None: its mean, ``Reward: <name>``.
        evaluation: how ``eapo eval`` runs it (:class:`EvalScorer`); None: it is not an evaluation scorer.
    """

    name: str
    build: Callable[..., Any]
    title: str
    help: str = ""
    light: bool = False
    default_weight: float = 0.0
    run_options: Callable[[Any, dict[str, Any], Path | None], dict[str, Any]] | None = None
    metrics: tuple[str, ...] = ()
    panels: tuple[tuple[str, str], ...] | None = None
    evaluation: EvalScorer | None = field(default_factory=EvalScorer)

    @property
    def mean_key(self) -> str:
        """``reward/<name>/mean``: the metric key of its mean score."""
        return f"reward/{self.name}/mean"

    @property
    def plot_panels(self) -> tuple[tuple[str, str], ...]:
        """Its ``eapo plot`` panels (``panels``, else its mean as ``Reward: <name>``)."""
        return self.panels if self.panels is not None else ((self.mean_key, f"Reward: {self.name}"),)

    @property
    def scorer_name(self) -> str | None:
        """Its scorer's name in evaluation, or None when it is not an evaluation scorer."""
        if self.evaluation is None:
            return None
        return self.evaluation.name or self.name

    @property
    def scorer_title(self) -> str:
        """Its scorer's title in the evaluation report."""
        return (self.evaluation.title if self.evaluation is not None else "") or self.title


#: name -> :class:`RewardComponent`, in registration order. Filled by :func:`register_reward`.
REWARD_COMPONENTS: dict[str, RewardComponent] = {}


def register_reward(component: RewardComponent) -> RewardComponent:
    """Add ``component`` to :data:`REWARD_COMPONENTS`; every view of it (configuration, metrics, plots,
    evaluation, summary) follows. Its names must be new: the component's, its scorer's and its columns'."""
    if component.name in REWARD_COMPONENTS:
        raise ValueError(f"reward component {component.name!r} is registered twice")
    if component.default_weight < 0:
        raise ValueError(f"reward component {component.name!r}: default_weight must be >= 0")
    scorer = component.evaluation
    if scorer is not None:
        name = component.scorer_name
        taken = {other.scorer_name: other.name for other in REWARD_COMPONENTS.values()}
        if name in taken:
            raise ValueError(
                f"reward component {component.name!r}: evaluation scorer {name!r} is {taken[name]!r}'s"
            )
        columns = {column.key for other in eval_scorers().values() for column in other.columns}
        averages = {"avg", *(table.avg for other in eval_scorers().values() for table in other.tables)}
        for column in scorer.columns:
            if column.key in columns or column.key in averages:
                raise ValueError(f"reward component {component.name!r}: column {column.key!r} exists already")
        taken_settings = {key: owner for key, (owner, _) in scorer_settings().items()}
        for setting in scorer.settings:
            if setting.name in taken_settings:
                raise ValueError(
                    f"reward component {component.name!r}: scorer setting {setting.name!r} is "
                    f"{taken_settings[setting.name]!r}'s"
                )
            taken_settings[setting.name] = name
        if scorer.gate is not None and any(other.gate for other in eval_scorers().values()):
            raise ValueError(
                f"reward component {component.name!r}: only one scorer gates the strict columns, "
                f"and {next(n for n, o in eval_scorers().items() if o.gate)!r} does"
            )
    REWARD_COMPONENTS[component.name] = component
    return component


def unregister_reward(name: str) -> RewardComponent:
    """Remove the component ``name`` (a test's, after it ran); returns its registration."""
    if name not in REWARD_COMPONENTS:
        raise ValueError(f"no reward component {name!r} is registered")
    return REWARD_COMPONENTS.pop(name)


def default_weights() -> dict[str, float]:
    """``reward.weights``' default: each component with a ``default_weight`` > 0, in registration order."""
    return {c.name: c.default_weight for c in REWARD_COMPONENTS.values() if c.default_weight > 0}


def light_components() -> frozenset[str]:
    """The components built without loading a model or opening a client (``light``)."""
    return frozenset(c.name for c in REWARD_COMPONENTS.values() if c.light)


def component_panels() -> tuple[tuple[str, str], ...]:
    """Every component's ``eapo plot`` panels, in registration order."""
    return tuple(panel for c in REWARD_COMPONENTS.values() for panel in c.plot_panels)


def eval_scorers() -> dict[str, EvalScorer]:
    """Evaluation scorer name -> its :class:`EvalScorer`, name and title filled in, in registration order."""
    out = {}
    for component in REWARD_COMPONENTS.values():
        scorer = component.evaluation
        if scorer is None:
            continue
        name = component.scorer_name
        assert name is not None
        out[name] = replace(scorer, name=name, title=component.scorer_title)
    return out


def scorer_component(scorer: str) -> RewardComponent:
    """The component whose evaluation scorer is named ``scorer``."""
    for component in REWARD_COMPONENTS.values():
        if component.scorer_name == scorer:
            return component
    known = [c.scorer_name for c in REWARD_COMPONENTS.values() if c.scorer_name]
    raise ValueError(f"unknown scorer {scorer!r}; valid: {', '.join(known)}")  # type: ignore[arg-type]


def eval_columns() -> list[tuple[str, EvalColumn]]:
    """``(scorer name, column)`` of every registered column, in column order (``order``, then registration)."""
    listed = [(name, column) for name, scorer in eval_scorers().items() for column in scorer.columns]
    return sorted(listed, key=lambda item: item[1].order)


def scorer_settings() -> dict[str, tuple[str, ScorerSetting]]:
    """Every registered scorer's settings (:class:`ScorerSetting`): name -> (scorer name, setting), in
    registration order."""
    return {
        setting.name: (name, setting)
        for name, scorer in eval_scorers().items()
        for setting in scorer.settings
    }
