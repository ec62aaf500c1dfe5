"""The soft overlong penalty (DAPO Eq. 13): hand-computed values, its boundaries, its options, TRL's
call, the composite, and the cap the run config gives it."""

from __future__ import annotations

from pathlib import Path

import pytest

from eapo.config import ConfigError, load_config, reward_options, reward_settings
from eapo.rewards import REWARD_COMPONENTS, make_composite, make_reward
from eapo.rewards.overlong import OverlongPenalty, soft_overlong_penalty

TINY = Path(__file__).resolve().parents[2] / "src" / "eapo" / "configs" / "tiny.yaml"


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        # L_max = 100, L_cache = 20: free up to 80 tokens, -1 at 100 and past it
        (0, 0.0),
        (79, 0.0),
        (80, 0.0),  # exactly L_max - L_cache: still free
        (81, -1 / 20),  # (80 - 81) / 20 = -0.05
        (90, -0.5),  # (80 - 90) / 20 = -0.5 (TRL's docstring example)
        (99, -19 / 20),  # (80 - 99) / 20 = -0.95
        (100, -1.0),  # exactly L_max: (80 - 100) / 20 = -1, cut at the cap
        (101, -1.0),  # beyond the cap
        (10_000, -1.0),
    ],
)
def test_dapo_equation_by_hand(length: int, expected: float) -> None:
    assert soft_overlong_penalty(length, 100, 20) == pytest.approx(expected, abs=1e-12)
    reward = make_reward("overlong", max_tokens=100, buffer=20)
    assert reward(None, ["x"], completion_lengths=[length]) == [pytest.approx(expected, abs=1e-12)]


def test_zero_buffer_is_the_hard_penalty_and_full_buffer_a_length_penalty() -> None:
    hard = OverlongPenalty(max_tokens=10, buffer=0)
    assert hard(None, ["a"] * 3, completion_lengths=[10, 11, 0]) == [0.0, -1.0, 0.0]
    # buffer = cap: the ramp starts at 0 tokens, R = (0 - |y|) / 10
    ramp = OverlongPenalty(max_tokens=10, buffer=10)
    assert ramp(None, ["a"] * 3, completion_lengths=[0, 3, 10]) == [0.0, pytest.approx(-0.3), -1.0]


def test_buffer_defaults_to_a_fifth_of_the_cap() -> None:
    assert OverlongPenalty(max_tokens=20480).buffer == 4096  # DAPO's L_cache
    assert OverlongPenalty(max_tokens=24).buffer == 4  # 24 // 5 = 4
    assert OverlongPenalty(max_tokens=3).buffer == 1  # at least one token
    assert "cap 24 tokens, buffer 4" in OverlongPenalty(max_tokens=24).label


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "max_tokens .* is required"),
        ({"max_tokens": 0}, "max_tokens must be an int >= 1"),
        ({"max_tokens": 10.5}, "max_tokens must be an int >= 1"),
        ({"max_tokens": True}, "max_tokens must be an int >= 1"),
        ({"max_tokens": 10, "buffer": 11}, r"buffer must be an int in \[0, max_tokens=10\]"),
        ({"max_tokens": 10, "buffer": -1}, r"buffer must be an int in \[0, max_tokens=10\]"),
        ({"max_tokens": 10, "buffer": 2.5}, r"buffer must be an int"),
    ],
)
def test_bad_options_are_refused(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_reward("overlong", **options)


def test_unknown_option_names_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match=r"does not take option\(s\) \['max_len'\].*'max_tokens', 'buffer'"):
        make_reward("overlong", max_len=10)


def test_lengths_come_from_completion_lengths_or_completion_ids() -> None:
    reward = OverlongPenalty(max_tokens=10, buffer=4)
    # from TRL's ids: 3 tokens -> 0; 8 tokens -> (6 - 8) / 4 = -0.5
    assert reward(None, ["a", "b"], completion_ids=[[1, 2, 3], list(range(8))]) == [0.0, -0.5]
    # completion_lengths wins over completion_ids (eapo's lengths after a stop string cut the sample)
    assert reward(None, ["a"], completion_lengths=[7], completion_ids=[[1] * 10]) == [-0.25]  # (6 - 7) / 4
    assert reward(None, ["a", "b"], completion_lengths=[None, 12]) == [None, -1.0]  # None: could not score
    with pytest.raises(ValueError, match="pass completion_lengths=.* or TRL's completion_ids"):
        reward(None, ["a"])
    with pytest.raises(ValueError, match="completion_lengths has 1 entries but completions has 2"):
        reward(None, ["a", "b"], completion_lengths=[3])
    with pytest.raises(ValueError, match=r"ints >= 0"):
        reward(None, ["a"], completion_lengths=[-1])
    with pytest.raises(ValueError, match=r"ints >= 0"):
        reward(None, ["a"], completion_lengths=[2.0])


def test_called_as_trl_calls_a_reward_function_and_matches_trl() -> None:
    """TRL 1.16's GRPOTrainer._calculate_rewards: ``fn(prompts=..., completions=..., completion_ids=...,
    **dataset columns, trainer_state=..., log_extra=..., log_metric=...)``; ``None`` becomes NaN there."""
    from trl.rewards import get_soft_overlong_punishment

    reward = make_reward("overlong", max_tokens=100, buffer=20)
    completion_ids = [[7] * n for n in (5, 80, 81, 90, 100, 120)]
    prompts = [[{"role": "user", "content": "How do I treat a burn?"}]] * len(completion_ids)
    completions = [[{"role": "assistant", "content": "text"}]] * len(completion_ids)
    values = reward(
        prompts=prompts,
        completions=completions,
        completion_ids=completion_ids,
        reference=["Cool it."] * len(completion_ids),  # a dataset column, passed by its name
        trainer_state=None,
        log_extra=lambda *a: None,
        log_metric=lambda *a: None,
    )
    # 5, 80 -> 0; 81 -> -0.05; 90 -> -0.5; 100 -> -1; 120 -> -1
    assert values == pytest.approx([0.0, 0.0, -0.05, -0.5, -1.0, -1.0])
    trl = get_soft_overlong_punishment(max_completion_len=100, soft_punish_cache=20)
    assert values == trl(completion_ids)
    assert reward.__name__ == "overlong"


def test_in_a_composite_with_completion_lengths() -> None:
    composite = make_composite(
        {"format": 0.5, "overlong": 0.5}, overlong={"max_tokens": 10, "buffer": 4}, parallel=False
    )
    tagged = "<think>r</think><advice>a</advice>"
    result = composite.score(None, [tagged, tagged, "untagged"], None, completion_lengths=[6, 8, 10])
    # overlong: 6 <= 10 - 4 -> 0; 8 -> (6 - 8) / 4 = -0.5; 10 (the cap) -> -1
    assert result.components["overlong"] == [0.0, -0.5, -1.0]
    # total = 0.5·format + 0.5·overlong: 0.5; 0.5 - 0.25 = 0.25; 0 - 0.5 = -0.5 (the floor: 0.5·-1)
    assert result.rewards == pytest.approx([0.5, 0.25, -0.5])
    assert result.metrics["reward/overlong/mean"] == pytest.approx(-0.5)  # (0 - 0.5 - 1) / 3
    assert "overlong penalty (DAPO soft, cap 10 tokens, buffer 4)" in composite.label


def test_registered() -> None:
    assert REWARD_COMPONENTS["overlong"].build is OverlongPenalty


def test_run_config_gives_the_cap_of_the_rollouts() -> None:
    config = load_config(TINY, ["reward.weights.overlong=0.1"])  # tiny: rollout.max_completion_tokens=24
    assert reward_options(config)["overlong"] == {"max_tokens": 24}
    assert "overlong" not in config.reward.options  # the config's own mapping is left as it was
    weights, options, _ = reward_settings(config)
    assert weights["overlong"] == 0.1 and options["overlong"] == {"max_tokens": 24}
    assert make_reward("overlong", **options["overlong"]).buffer == 4
    # an explicit cap and buffer are kept
    config = load_config(
        TINY,
        [
            "reward.weights.overlong=0.1",
            "reward.options.overlong.max_tokens=20",
            "reward.options.overlong.buffer=5",
        ],
    )
    assert reward_options(config)["overlong"] == {"max_tokens": 20, "buffer": 5}
    # without overlong in the weights nothing is added
    assert "overlong" not in reward_options(load_config(TINY))


def test_run_config_refuses_bad_overlong_options_when_loaded() -> None:
    # the default cap (24) is below the buffer: caught when the config is loaded, naming the key
    with pytest.raises(
        ConfigError, match=r"reward\.options\.overlong is invalid: .*buffer must be .* got 30"
    ) as info:
        load_config(TINY, ["reward.weights.overlong=0.1", "reward.options.overlong.buffer=30"])
    assert info.value.key == "reward.options.overlong"
    assert "set by the override 'reward.options.overlong.buffer=30'" in str(info.value)
    with pytest.raises(ConfigError, match=r"does not take option\(s\) \['cap'\]"):
        load_config(TINY, ["reward.weights.overlong=0.1", "reward.options.overlong.cap=30"])


def test_the_guides_yaml_examples_load() -> None:
    """Each YAML block of docs/guide/rewards.md's section on the whole answer is a valid config."""
    import re

    import yaml

    from eapo.config import config_from_tree

    guide = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "rewards.md").read_text(
        encoding="utf-8"
    )
    section = guide.split("## The whole answer", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 4  # rollout.stop, the strict format check, overlong, repetition
    configs = [config_from_tree(yaml.safe_load(block)) for block in blocks]
    assert configs[0].rollout.stop == ["</advice>"]
    assert configs[1].reward.options["format"] == {"strict": True}
    assert reward_options(configs[2])["overlong"] == {"buffer": 32, "max_tokens": 2048}  # the default cap
    assert configs[3].reward.weights["repetition"] == 0.2
