"""The verl quick start of the README and of docs/getting-started.md composes into a run eapo's trainer
accepts: its overrides parse with verl's Hydra config, verl's ``validate_config`` passes, the eapo trainer
is built (verl's real ``__init__``) with the weights the command names, and the reward function loads.
Training itself needs GPUs and vLLM (not run, as for the example scripts)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip("verl")

import verl  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.trainer.ppo.v1 import get_trainer_cls  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402

from eapo.core import Algorithm  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
MARKER = "<!-- docs-test: verl-quickstart -->"


def quickstart_overrides(page: Path) -> list[str]:
    """The Hydra overrides of the page's ``python -m verl.trainer.main_ppo`` command (after the marker)."""
    text = page.read_text(encoding="utf-8")
    assert MARKER in text, f"{page} has no verl quick start ({MARKER})"
    block = re.search(r"```bash\n(.*?)```", text[text.index(MARKER) :], flags=re.S).group(1)
    command = block.replace("\\\n", " ")
    (line,) = [
        line for line in command.splitlines() if line.strip().startswith("python -m verl.trainer.main_ppo")
    ]
    return shlex.split(line, comments=True)[3:]


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_verl_quickstart_composes_into_an_eapo_run(page):
    overrides = quickstart_overrides(ROOT / page)
    assert "algorithm.adv_estimator=eapo" in overrides
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    OmegaConf.resolve(config)
    validate_config(
        config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    actor = config.actor_rollout_ref.actor
    assert config.actor_rollout_ref.rollout.n == 4
    # the paper's objective, not verl's defaults: 1/|y_i| and a k3 ("low_var_kl") KL loss at 0.001
    assert actor.loss_agg_mode == "seq-mean-token-mean"
    assert (actor.use_kl_loss, actor.kl_loss_coef, actor.kl_loss_type) == (True, 0.001, "low_var_kl")
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.2)
    assert config.trainer.use_v1 and config.trainer.v1.trainer_mode == "eapo"
    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config)
    assert trainer.algorithm == Algorithm.resolve("eapo", {"w0": 0.2, "w_max": 2.0}, objective=False)
    reward_fn = get_custom_reward_fn(config)
    assert reward_fn.args[0].__module__ == "eapo.engines.verl.reward"
