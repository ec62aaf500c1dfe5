"""The registered estimators, fetched through verl's own registry, against eapo.core and by hand."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

import eapo.engines.verl  # noqa: E402, F401  (the plugin; verl also loads it via the entry point)
from eapo.core import (  # noqa: E402
    EAPOStep,
    group_advantages,
    make_weighting,
    positive_mask,
    weight_advantages,
)
from eapo.engines.verl import step_call  # noqa: E402

FIXED = {"psr": (1.0, 0.0), "nsr": (0.0, 1.0), "w_reinforce": (0.1, 1.0)}


def algorithm(**eapo_settings):
    section = {"adv_estimator": "eapo", "norm_adv_by_std_in_grpo": True}
    if eapo_settings:
        section["eapo"] = eapo_settings
    return OmegaConf.create(section)


def outcome_batch(scores: list[float], lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """token_level_rewards (reward on the last response token, as verl's reward managers put it) and mask."""
    width = max(lengths)
    mask = torch.zeros(len(scores), width)
    rewards = torch.zeros(len(scores), width)
    for row, (score, length) in enumerate(zip(scores, lengths, strict=True)):
        mask[row, :length] = 1.0
        rewards[row, length - 1] = score
    return rewards, mask


def polarity_weighted_advantages(rewards, group_size, w_pos, w_neg, *, scale="group"):
    """eapo.core's three steps on contiguous groups: the maths the estimators must reproduce."""
    positive = positive_mask(rewards, group_size)
    advantages = group_advantages(rewards, group_size, scale=scale)
    return weight_advantages(advantages, positive, w_pos, w_neg), positive


def expected_from_core(scores, uids, w_pos, w_neg, group_size, scale="group"):
    """eapo.core on the rows sorted into contiguous groups, scattered back to the given order."""
    order = sorted(range(len(uids)), key=lambda row: (uids[row], row))
    weighted, _ = polarity_weighted_advantages(
        torch.tensor([scores[row] for row in order]), group_size, w_pos, w_neg, scale=scale
    )
    out = torch.empty(len(uids))
    out[torch.tensor(order)] = weighted
    return out


def test_every_registered_scheme_is_an_estimator_in_verls_registry():
    from eapo.core import WEIGHTING_SCHEMES

    names = [scheme.verl_estimator for scheme in WEIGHTING_SCHEMES.values()]
    assert names == ["eapo_grpo", "psr", "nsr", "w_reinforce", "qae", "eapo", "eapo_pi"]
    for name in names:
        fn = get_adv_estimator_fn(name)
        assert fn is eapo.engines.verl.estimators()[name]
        assert fn.__name__ == f"compute_{name}_advantage"


def test_hand_derived_values_for_one_group():
    # rewards [1, 0, 0.5, 0.5]: mean 0.5, unbiased std sqrt(0.5/3); A = ±0.5/std = ±1.2247..., 0, 0
    a = 0.5 / (math.sqrt(0.5 / 3) + 1e-6)
    rewards, mask = outcome_batch([1.0, 0.0, 0.5, 0.5], [3, 2, 4, 1])
    index = np.array(["q", "q", "q", "q"], dtype=object)
    expected = {
        "psr": [a, 0.0, 0.0, 0.0],
        "nsr": [0.0, -a, 0.0, 0.0],
        "w_reinforce": [0.1 * a, -a, 0.0, 0.0],
    }
    for name, sequence_advantages in expected.items():
        advantages, returns = get_adv_estimator_fn(name)(
            token_level_rewards=rewards, response_mask=mask, index=index, config=algorithm()
        )
        assert advantages.shape == (4, 4)
        torch.testing.assert_close(advantages, torch.tensor(sequence_advantages).unsqueeze(-1) * mask)
        assert torch.equal(advantages, returns)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", ["psr", "nsr", "w_reinforce"])
def test_fixed_estimators_equal_eapo_core_on_shuffled_groups(name, seed):
    generator = torch.Generator().manual_seed(seed)
    num_prompts, group_size = 5, 4
    scores = torch.rand(num_prompts * group_size, generator=generator).round(decimals=1).tolist()
    uids = [f"p{row // group_size}" for row in range(len(scores))]
    permutation = torch.randperm(
        len(scores), generator=generator
    ).tolist()  # verl balances, so groups interleave
    scores = [scores[row] for row in permutation]
    uids = [uids[row] for row in permutation]
    lengths = (torch.randint(1, 7, (len(scores),), generator=generator)).tolist()
    rewards, mask = outcome_batch(scores, lengths)

    advantages, _ = get_adv_estimator_fn(name)(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(uids, dtype=object),
        config=algorithm(),
    )

    expected = expected_from_core(scores, uids, *FIXED[name], group_size)
    torch.testing.assert_close(advantages, expected.unsqueeze(-1) * mask, rtol=0, atol=1e-6)


def test_eapo_uses_the_trainers_weights_and_reports_its_split():
    scores = [0.9, 0.1, 0.4, 0.6, 0.2, 0.2, 0.8, 0.5]
    uids = ["a", "b", "a", "b", "a", "b", "a", "b"]
    rewards, mask = outcome_batch(scores, [2] * 8)
    step = EAPOStep(make_weighting("eapo", w0=0.35, w_neg=1.5))  # the first step's w+ is w0
    with step_call(step, 1.0, "eapo") as call:
        advantages, _ = get_adv_estimator_fn("eapo")(
            token_level_rewards=rewards,
            response_mask=mask,
            index=np.array(uids, dtype=object),
            config=algorithm(),
        )
    expected = expected_from_core(scores, uids, 0.35, 1.5, 4)
    torch.testing.assert_close(advantages[:, 0], expected, rtol=0, atol=1e-6)
    # group a = [0.9, 0.4, 0.2, 0.8] (mean 0.575): 0.9, 0.8 positive; b = [0.1, 0.6, 0.2, 0.5] (mean 0.35): 0.6, 0.5
    assert call.metrics == {
        "entropy/rollout": 1.0,
        "eapo/H0": 1.0,
        "eapo/w_pos": pytest.approx(0.35),
        "eapo/w_neg": 1.5,
        "eapo/frac_positive": 0.5,
        "eapo/num_unscored": 0.0,
    }


def test_eapo_without_the_trainer_fails_and_says_what_to_set():
    rewards, mask = outcome_batch([1.0, 0.0], [1, 1])
    with pytest.raises(RuntimeError, match="trainer.v1.trainer_mode=eapo"):
        get_adv_estimator_fn("eapo")(
            token_level_rewards=rewards,
            response_mask=mask,
            index=np.array(["q", "q"], dtype=object),
            config=algorithm(),
        )


def test_overrides_and_dr_grpo_scaling_from_the_algorithm_config():
    scores = [1.0, 0.0, 0.0, 0.0]
    rewards, mask = outcome_batch(scores, [1, 1, 1, 1])
    config = algorithm(w_pos=0.5, w_neg=2.0)
    config.norm_adv_by_std_in_grpo = False  # centred only: A = r - mean = [0.75, -0.25, -0.25, -0.25]
    advantages, _ = get_adv_estimator_fn("w_reinforce")(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(["q"] * 4, dtype=object),
        config=config,
    )
    torch.testing.assert_close(advantages[:, 0], torch.tensor([0.375, -0.5, -0.5, -0.5]))


def test_settings_errors_name_the_key():
    rewards, mask = outcome_batch([1.0, 0.0], [1, 1])
    index = np.array(["q", "q"], dtype=object)
    psr = get_adv_estimator_fn("psr")
    with pytest.raises(ValueError, match=r"algorithm.eapo has unknown keys \['w_plus'\]"):
        psr(token_level_rewards=rewards, response_mask=mask, index=index, config=algorithm(w_plus=1.0))
    with pytest.raises(ValueError, match="algorithm.eapo.method=nsr"):
        psr(token_level_rewards=rewards, response_mask=mask, index=index, config=algorithm(method="nsr"))
    with pytest.raises(ValueError, match=r"algorithm.eapo.w_neg=-1.0 is invalid; valid: a number >= 0"):
        psr(token_level_rewards=rewards, response_mask=mask, index=index, config=algorithm(w_neg=-1.0))
    with pytest.raises(
        ValueError, match=r"algorithm.eapo.w0 does not apply to method 'psr'; it accepts w_pos, w_neg"
    ):
        psr(token_level_rewards=rewards, response_mask=mask, index=index, config=algorithm(w0=0.3))


def test_unequal_groups_and_singletons():
    # group x has 3 rollouts, y has 2, z has 1 (no contrast: advantage 0)
    scores = [0.2, 1.0, 0.7, 0.3, 0.9, 0.5]
    uids = ["x", "y", "x", "z", "x", "y"]
    rewards, mask = outcome_batch(scores, [1] * 6)
    advantages, _ = get_adv_estimator_fn("nsr")(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(uids, dtype=object),
        config=algorithm(),
    )
    x, _ = polarity_weighted_advantages(torch.tensor([0.2, 0.7, 0.9]), 3, 0.0, 1.0)
    y, _ = polarity_weighted_advantages(torch.tensor([1.0, 0.5]), 2, 0.0, 1.0)
    expected = torch.tensor([x[0], y[0], x[1], 0.0, x[2], y[1]])
    torch.testing.assert_close(advantages[:, 0], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_equal_weights_reproduce_verls_grpo(seed):
    """With w+ = w- = 1 the estimator is verl's own GRPO (groups of >= 2)."""
    generator = torch.Generator().manual_seed(seed)
    uids = np.array([f"p{i % 6}" for i in torch.randperm(24, generator=generator).tolist()], dtype=object)
    rewards, mask = outcome_batch(torch.rand(24, generator=generator).tolist(), [3] * 24)
    ours, _ = get_adv_estimator_fn("w_reinforce")(
        token_level_rewards=rewards, response_mask=mask, index=uids, config=algorithm(w_pos=1.0)
    )
    verls, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=True)
    torch.testing.assert_close(ours, verls, rtol=0, atol=1e-5)


def test_verls_compute_advantage_dispatches_to_the_plugin():
    """verl's own dispatcher (ray_trainer.compute_advantage) on a DataProto, as its trainers call it."""
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    scores, uids = [1.0, 0.0, 0.5, 0.5], ["q"] * 4
    rewards, mask = outcome_batch(scores, [2, 2, 2, 2])
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )
    out = compute_advantage(data, adv_estimator="psr", config=algorithm())
    expected = expected_from_core(scores, uids, 1.0, 0.0, 4)
    torch.testing.assert_close(out.batch["advantages"], expected.unsqueeze(-1) * mask, rtol=0, atol=1e-6)


def test_a_rollout_that_could_not_be_scored_gets_no_advantage():
    """compute_score gives NaN to a rollout the composite could not score (missing=unscorable): its
    advantage is 0 and its group's mean and std come from the other rollouts, as on TRL."""
    scores = [0.9, 0.1, math.nan, 0.6, 0.2, 0.2, 0.8, 0.5]
    uids = ["a", "b", "a", "b", "a", "b", "a", "b"]
    rewards, mask = outcome_batch(scores, [2] * 8)
    with step_call(EAPOStep(make_weighting("eapo", w0=0.5)), 2.0, "eapo") as call:
        advantages, _ = get_adv_estimator_fn("eapo")(
            token_level_rewards=rewards,
            response_mask=mask,
            index=np.array(uids, dtype=object),
            config=algorithm(),
        )
    a, _ = polarity_weighted_advantages(torch.tensor([0.9, 0.2, 0.8]), 3, 0.5, 1.0)
    b, _ = polarity_weighted_advantages(torch.tensor([0.1, 0.6, 0.2, 0.5]), 4, 0.5, 1.0)
    expected = torch.tensor([a[0], b[0], 0.0, b[1], a[1], b[2], a[2], b[3]])
    torch.testing.assert_close(advantages[:, 0], expected, rtol=0, atol=1e-6)
    assert not torch.isnan(advantages).any()
    # a = [0.9, 0.2, 0.8] (mean 0.633): 2 positive; b: 2 positive; 7 scored, 1 not
    assert (call.metrics["eapo/frac_positive"], call.metrics["eapo/num_unscored"]) == (4 / 7, 1.0)


def test_entropy_agg_is_a_setting_not_a_weight():
    rewards, mask = outcome_batch([1.0, 0.0], [1, 1])
    advantages, _ = get_adv_estimator_fn("psr")(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(["q", "q"], dtype=object),
        config=algorithm(entropy_agg="seq-mean-token-mean"),
    )
    assert advantages[0, 0] > 0 and advantages[1, 0] == 0.0
