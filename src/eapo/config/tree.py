"""The ``eapo train`` tree, :class:`RunConfig`: one field per section, and the one place a whole
configuration is validated (:meth:`RunConfig.validate`: each setting against its field, then the
relations between settings)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eapo.config.algorithm import AlgorithmConfig
from eapo.config.fields import ConfigError, allowed, coerce, is_section, one_of, satisfies, setting
from eapo.config.reward import RewardConfig
from eapo.config.rollout import DataConfig, ModelConfig, RolloutConfig
from eapo.config.train import LoggingConfig, TrainConfig
from eapo.config.verl import VerlConfig
from eapo.core.settings import SettingError
from eapo.rewards import REWARD_COMPONENTS, make_reward
from eapo.rewards.registry import light_components


@dataclass
class RunConfig:
    engine: str = setting(
        "The training engine: trl (one machine: TRL, accelerate, DeepSpeed) or verl (verl's main_ppo with "
        "eapo's plugin; eapo.engines.verl.launch).",
        "trl",
        valid=one_of("trl", "verl"),
    )
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    verl: VerlConfig = field(default_factory=VerlConfig)
    plugins: list[str] = setting(
        "Your own modules that register a weighting scheme, an entropy control or a reward component "
        "(eapo.plugins), imported before the rest of the config is read; added to EAPO_PLUGINS, which every "
        "process eapo starts inherits. A plugin's own settings need it imported at start: the CLI reads this "
        "list first, a Python script sets EAPO_PLUGINS.",
        factory=list,
        valid=satisfies(
            lambda names: all(isinstance(n, str) and n.strip() for n in names), "a list of module names"
        ),
    )

    def validate(self) -> RunConfig:
        """Check every setting against what its field admits (``valid`` in the field's metadata), then
        the relations between settings; raise :class:`ConfigError` naming the key, the value and what
        is allowed. Ints given for float settings become floats."""
        for key, section, spec, tp in _settings(self):
            value = getattr(section, spec.name)
            try:
                coerced = coerce(key, value, tp)
            except ConfigError as error:
                raise ConfigError(f"{error}; valid: {allowed(spec, tp)}", key=key) from None
            if coerced is not value:
                setattr(section, spec.name, coerced)
            valid = spec.metadata.get("valid")
            if isinstance(section, AlgorithmConfig):  # its ranges: once, by Algorithm.resolve (below)
                continue
            if coerced is not None and valid is not None and not valid.admits(coerced):
                raise ConfigError(f"{key}={coerced!r} is invalid; valid: {allowed(spec, tp)}", key=key)
        self._check_relations()
        return self

    def _check_relations(self) -> None:
        """Constraints between settings (each setting alone has passed its own)."""
        a, r, t = self.algorithm, self.rollout, self.train
        try:
            a.resolve()  # the algorithm section, validated once (eapo.core.Algorithm.resolve)
        except SettingError as error:
            raise ConfigError(str(error), key=error.key) from None
        problems = a.trl_problems()
        if problems:
            raise ConfigError(problems[0], key="algorithm.method")
        if r.compile and r.cache_implementation != "static":
            raise ConfigError(
                "rollout.compile=true needs rollout.cache_implementation=static (a fixed-size cache)",
                key="rollout.compile",
            )
        completions = t.prompts_per_step * r.num_generations
        if completions % t.micro_batch_size != 0:
            raise ConfigError(
                f"train.prompts_per_step × rollout.num_generations = {completions} completions per step must be a "
                f"multiple of train.micro_batch_size={t.micro_batch_size}",
                key="train.micro_batch_size",
            )
        if t.micro_batch_size % r.num_generations != 0 and r.num_generations % t.micro_batch_size != 0:
            raise ConfigError(
                f"train.micro_batch_size={t.micro_batch_size} and rollout.num_generations={r.num_generations} must "
                "divide one another",
                key="train.micro_batch_size",
            )
        reward = self.reward
        unlisted = sorted(set(reward.options) - set(reward.weights))
        if unlisted:
            raise ConfigError(
                f"reward.options has {unlisted}, which reward.weights does not list ({list(reward.weights)})",
                key="reward.options",
            )
        self._check_light_rewards()
        lora = self.model.lora
        if lora.layers is not None and isinstance(lora.target_modules, str):
            raise ConfigError(
                f"model.lora.layers needs model.lora.target_modules as a list of module names (peft cannot "
                f"restrict {lora.target_modules!r} to layers), e.g. [q_proj, k_proj, v_proj, o_proj, "
                "gate_proj, up_proj, down_proj]",
                key="model.lora.layers",
            )

    def _check_light_rewards(self) -> None:
        """Build each listed component that loads nothing (its registration's ``light``) with the
        options it will get (:func:`reward_options`), so a bad option fails here, naming its key."""
        options = reward_options(self)
        for name in sorted(light_components() & set(self.reward.weights)):
            try:
                make_reward(name, **options.get(name, {}))
            except (ValueError, TypeError) as error:
                raise ConfigError(
                    f"reward.options.{name} is invalid: {error}", key=f"reward.options.{name}"
                ) from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _settings(config: Any) -> list[tuple[str, Any, dataclasses.Field, Any]]:
    """:func:`setting_fields` of a config instance, each with the section object that holds it."""
    out = []
    for key, spec, tp in setting_fields(type(config)):
        section = config
        for part in key.split(".")[:-1]:
            section = getattr(section, part)
        out.append((key, section, spec, tp))
    return out


def setting_fields(cls: type | None = None, prefix: str = "") -> list[tuple[str, dataclasses.Field, Any]]:
    """Every setting of the config class ``cls`` (default :class:`RunConfig`), sections unrolled:
    ``(dotted key, dataclasses.Field, type)``. What each admits is ``field.metadata["valid"]``."""
    cls = RunConfig if cls is None else cls
    out = []
    hints = typing.get_type_hints(cls)
    for spec in dataclasses.fields(cls):
        tp = hints[spec.name]
        if is_section(tp):
            out.extend(setting_fields(tp, f"{prefix}{spec.name}."))
        else:
            out.append((prefix + spec.name, spec, tp))
    return out


def reward_options(config: RunConfig, run_dir: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """``reward.options`` as the components receive them, in training and in evaluation alike: each
    component that ``reward.weights`` or ``reward.options`` lists has its options completed from the rest
    of the configuration by its registration's ``run_options`` (:class:`eapo.rewards.RewardComponent`:
    the format check's ``prefix`` from ``data.response_prefix``, the overlong cap from
    ``rollout.max_completion_tokens``, the judge's endpoint from ``reward.judge`` with its cache under
    ``run_dir``). An explicit value is kept; the configuration itself is not modified."""
    options = {name: dict(values) for name, values in config.reward.options.items()}
    run_path = Path(run_dir) if run_dir is not None else None
    for name, component in REWARD_COMPONENTS.items():
        listed = name in config.reward.weights or name in options
        if listed and component.run_options is not None:
            options[name] = component.run_options(config, options.get(name, {}), run_path)
    return options


def reward_settings(
    config: RunConfig, run_dir: str | Path | None = None
) -> tuple[dict[str, float], dict[str, dict[str, Any]], str]:
    """``(weights, options, missing)`` of the configured composite reward, as
    :func:`eapo.rewards.make_composite` takes them (the TRL engine here, verl's ``compute_score``
    through its ``reward_kwargs``): the weighted components and their options (:func:`reward_options`,
    the judge's cache under ``run_dir``) and what an unscorable rollout gets."""
    weights = {name: alpha for name, alpha in config.reward.weights.items() if alpha}
    unknown = sorted(set(config.reward.options) - set(config.reward.weights))
    if unknown:
        raise ConfigError(
            f"reward.options has {unknown}, which reward.weights does not list ({list(config.reward.weights)})"
        )
    configured = reward_options(config, run_dir)
    options = {name: opts for name, opts in configured.items() if name in weights}
    check_judge_settings(config)
    return weights, options, config.reward.missing


def check_judge_settings(config: RunConfig) -> None:
    """A weighted LLM judge needs an endpoint and a model (checked before anything is loaded)."""
    judge = config.reward.judge
    if config.reward.weights.get("llm_judge") and (not judge.base_url or not judge.model):
        raise ConfigError(
            "reward.weights.llm_judge > 0 needs reward.judge.base_url and reward.judge.model "
            "(an OpenAI-compatible endpoint), or set reward.weights.llm_judge=0",
            key="reward.weights.llm_judge",
        )
