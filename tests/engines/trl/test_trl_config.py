"""``eapo.EAPOConfig``: TRL's GRPOConfig with the paper's objective as defaults and the weighting settings.

A TRL script that swaps GRPOTrainer/GRPOConfig for EAPOTrainer/EAPOConfig trains the paper's objective;
``eapo train`` builds its trainer from the same class; ``import eapo`` stays light.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eapo.config import load_config
from eapo.core import EntropyAdaptiveWeighting, FixedWeighting, make_weighting

ROOT = Path(__file__).resolve().parents[3]
CPU = {"use_cpu": True}


def _trl_config(**kwargs):
    from eapo import EAPOConfig

    return EAPOConfig(output_dir="unused", **CPU, **kwargs)


def test_eapo_config_defaults_are_paper_rjua_yaml_objective():
    from trl import GRPOConfig

    paper = load_config(ROOT / "configs" / "paper_rjua.yaml")
    a, r = paper.algorithm, paper.rollout
    args = _trl_config()
    assert (args.loss_type, a.loss_type) == ("grpo", "grpo")  # 1/|y_i|
    assert args.beta == a.beta == 0.001
    assert args.use_bias_correction_kl is a.kl_bias_correction is False  # plain k3
    assert args.epsilon == a.epsilon == 0.2 and args.epsilon_high is a.epsilon_high is None
    assert args.num_generations == r.num_generations == 4
    assert args.scale_rewards == a.scale_rewards == "group"
    assert args.num_iterations == a.num_iterations == 1
    assert (args.method, args.split_by, args.entropy_agg) == (a.method, a.split_by, a.entropy_agg)
    assert (args.method, args.split_by, args.entropy_agg) == ("eapo", "mean", "token-mean")
    # the weighting the defaults build is the preset's (w0 0.2, w in [0, 2], w- 1, H_0 from step 1)
    ours = args.make_weighting()
    assert repr(ours) == repr(a.resolved().make_weighting()) == repr(make_weighting(a.method))
    assert args.algorithm == a.resolved()  # one value: EAPOConfig's and the YAML's agree
    assert (ours.w0, ours.w_min, ours.w_max, ours.w_neg) == (0.2, 0.0, 2.0, 1.0)
    # ... and TRL's own defaults are not the paper's objective (why EAPOConfig exists)
    trl = {name: f.default for name, f in GRPOConfig.__dataclass_fields__.items()}
    assert (trl["loss_type"], trl["beta"], trl["use_bias_correction_kl"], trl["num_generations"]) == (
        "dapo",
        0.0,
        True,
        8,
    )


def test_eapo_config_generates_as_eapo_train_does_with_its_defaults(tmp_path):
    """Issue 48: a TRL script's EAPOConfig() and eapo train's default tree give TRL the same completion
    length, vLLM importance correction and quantile split (TRL's own: 512 tokens, sequence_mask)."""
    from trl import GRPOConfig

    from eapo.engines.trl.args import grpo_args

    cli = grpo_args(load_config(None, []), tmp_path / "run")
    script = _trl_config()
    shared = (
        "max_completion_length",
        "vllm_importance_sampling_correction",
        "vllm_importance_sampling_mode",
        "vllm_importance_sampling_clip_min",
        "vllm_importance_sampling_clip_max",
        "split_by",
        "quantile_k",
        "quantile_method",
    )
    assert {key: getattr(script, key) for key in shared} == {key: getattr(cli, key) for key in shared}
    assert (script.max_completion_length, script.vllm_importance_sampling_mode) == (2048, "token_truncate")
    assert script.quantile_method == "linear"
    qae = load_config(None, ["algorithm.method=qae", "algorithm.quantile_method=inverse_cdf"])
    assert grpo_args(qae, tmp_path / "qae").quantile_method == "inverse_cdf"  # the tree's reaches TRL's
    trl = GRPOConfig.__dataclass_fields__
    assert (trl["max_completion_length"].default, trl["vllm_importance_sampling_mode"].default) == (
        512,
        "sequence_mask",
    )


def test_eapo_config_validates_the_weighting_once():
    with pytest.raises(ValueError, match="valid: grpo, psr, nsr, w_reinforce, qae, eapo, eapo_pi"):
        _trl_config(method="ppo")
    with pytest.raises(ValueError, match="w0 does not apply to method 'psr'; it accepts w_pos, w_neg"):
        _trl_config(method="psr", w0=0.3)
    with pytest.raises(ValueError, match="split_by='mode' is invalid; valid: mean, median"):
        _trl_config(split_by="mode")
    with pytest.raises(ValueError, match="entropy_agg='sum' is invalid"):
        _trl_config(entropy_agg="sum")
    with pytest.raises(ValueError, match="quantile_method='mode' is invalid; valid: linear, inverse_cdf"):
        _trl_config(method="qae", quantile_method="mode")
    with pytest.raises(ValueError, match="quantile_method=inverse_cdf applies only with EAPOConfig.split_by"):
        _trl_config(quantile_method="inverse_cdf")
    assert _trl_config(split_by="quantile", quantile_method="inverse_cdf").quantile_method == "inverse_cdf"
    scheme = _trl_config(method="w_reinforce", w_pos=0.05).make_weighting()
    assert isinstance(scheme, FixedWeighting) and scheme.weights(1.0) == (0.05, 1.0)


def test_eapo_config_shows_the_resolved_weighting_and_precision_follows_the_hardware():
    """The README's front door: EAPOConfig(...) on a machine without a bf16 GPU trains in fp32 (TRL's
    GRPOConfig would ask for bf16 and stop), and the config reads the weights the run uses."""
    import torch

    from eapo import EAPOConfig

    args = EAPOConfig(output_dir="unused")  # as the README writes it: no precision, no device
    assert (args.w0, args.w_min, args.w_max, args.w_neg, args.anchor_steps, args.w_pos) == (
        0.2,
        0.0,
        2.0,
        1.0,
        1,
        None,
    )
    psr = _trl_config(method="psr")
    assert (psr.w_pos, psr.w_neg, psr.w0) == (1.0, 0.0, None)
    if not torch.cuda.is_available():
        assert args.bf16 is False
    assert EAPOConfig(output_dir="unused", bf16=False).bf16 is False
    with pytest.raises(ValueError, match="multi_objective_aggregation='normalize_then_sum'"):
        _trl_config(multi_objective_aggregation="normalize_then_sum")


def test_grpo_args_returns_an_eapo_config_built_from_the_tree(tmp_path):
    from eapo.engines.trl.args import grpo_args
    from eapo.engines.trl.config import EAPOConfig

    config = load_config(
        ROOT / "configs" / "tiny.yaml",
        ["algorithm.w0=0.5", "algorithm.w_max=1.5", "algorithm.entropy_agg=seq-mean-token-mean"],
    )
    args = grpo_args(config, tmp_path / "run")
    assert type(args) is EAPOConfig
    assert (args.method, args.w0, args.w_max, args.w_min, args.entropy_agg) == (
        "eapo",
        0.5,
        1.5,
        0.0,  # unset: resolved to the scheme's default, the value the run uses
        "seq-mean-token-mean",
    )
    assert args.algorithm is config.algorithm.resolved()  # the tree's value, held (not resolved again)
    assert dict(args.algorithm.weights) == {
        "w0": 0.5,
        "w_min": 0.0,
        "w_max": 1.5,
        "w_neg": 1.0,
        "anchor_steps": 1,
        "integral_gain": 0.0,  # the paper's EAPO: no integral term
    }
    assert (args.loss_type, args.beta, args.use_bias_correction_kl) == ("grpo", 0.001, False)
    # trackers: tensorboard is eapo's own writer, the rest go to TRL's report_to
    assert args.report_to == [] and args.run_name == "run" and args.project == "eapo"
    tracked = grpo_args(
        load_config(ROOT / "configs" / "tiny.yaml", ["logging.report_to=[tensorboard,trackio]"]), tmp_path
    )
    assert tracked.report_to == ["trackio"]


def test_import_eapo_is_light_until_a_trl_name_is_used():
    code = (
        "import sys, eapo\n"
        "assert 'torch' not in sys.modules and 'trl' not in sys.modules, sorted(sys.modules)\n"
        "import eapo.engines.trl.config, eapo.engines.trl.trainer\n"
        "assert eapo.EAPOConfig is eapo.engines.trl.config.EAPOConfig and eapo.EAPOTrainer is eapo.engines.trl.trainer.EAPOTrainer\n"
        "from eapo import EAPOConfig, EAPOTrainer\n"
        "import eapo.config\n"
        "assert eapo.config.RunConfig is not EAPOConfig  # the CLI's YAML tree, another class\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        import eapo

        eapo.Nope  # noqa: B018


def _dataset(n: int = 4):
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": f"Question {i}: what helps a cold?", "reference": "rest"} for i in range(n)]
    )


def _length_reward(completions, **kwargs):
    """A TRL reward function: shorter is better (the tiny model's text is noise; any signal will do)."""
    return [1.0 / (1.0 + len(c)) for c in completions]


def test_a_trl_script_with_eapo_config_trains_the_paper_objective(tmp_path):
    """The TRL quick start with GRPOTrainer/GRPOConfig swapped for EAPOTrainer/EAPOConfig and no other
    eapo argument: the trainer uses the paper's objective and EAPO's weighting, and w+ follows H_t/H_0."""
    from eapo import EAPOConfig, EAPOTrainer
    from eapo.runtime.models import resolve_model

    trainer = EAPOTrainer(
        model=resolve_model("tiny"),
        reward_funcs=_length_reward,
        args=EAPOConfig(
            output_dir=str(tmp_path / "out"),
            **CPU,
            max_steps=2,
            per_device_train_batch_size=8,  # 2 prompts x N = 4
            max_completion_length=8,
            learning_rate=1e-3,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            gradient_checkpointing=False,
            seed=0,
        ),
        train_dataset=_dataset(),
    )
    # the objective the trainer runs (TRL reads these from args into its own attributes)
    assert trainer.loss_type == "grpo"
    assert trainer.beta == 0.001 and trainer.ref_model is not None  # beta > 0: a frozen reference is loaded
    assert trainer.args.use_bias_correction_kl is False
    assert trainer.epsilon_low == trainer.epsilon_high == 0.2
    assert trainer.num_generations == 4 and trainer.scale_rewards == "group"
    assert isinstance(trainer.weighting, EntropyAdaptiveWeighting)
    assert (trainer.weighting.w0, trainer.weighting.w_max) == (0.2, 2.0)
    assert (trainer.split_by, trainer.entropy_agg) == ("mean", "token-mean")

    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2
    h0 = logs[0]["entropy/rollout"]
    assert h0 > 0 and logs[0]["eapo/H0"] == pytest.approx(h0, rel=1e-6)
    assert logs[0]["eapo/w_pos"] == pytest.approx(0.2, rel=1e-6)  # H_1 = H_0: w+ = w0
    assert logs[1]["eapo/w_pos"] == pytest.approx(
        min(max(0.2 * logs[1]["entropy/rollout"] / h0, 0.0), 2.0), rel=1e-5
    )
    assert {entry["eapo/w_neg"] for entry in logs} == {1.0}
    assert all("kl" in entry for entry in logs)  # TRL logs the KL only when beta > 0


def test_a_plain_grpo_config_still_works_and_names_what_differs(tmp_path):
    from trl import GRPOConfig

    from eapo import EAPOTrainer
    from eapo.runtime.models import resolve_model

    args = GRPOConfig(
        output_dir=str(tmp_path), **CPU, per_device_train_batch_size=8, num_generations=4, report_to="none"
    )
    with pytest.warns(UserWarning, match=r"loss_type='dapo', paper 'grpo'.*beta=0.0, paper 0.001"):
        trainer = EAPOTrainer(
            model=resolve_model("tiny"), reward_funcs=_length_reward, args=args, train_dataset=_dataset()
        )
    assert trainer.loss_type == "dapo" and trainer.beta == 0.0  # TRL's objective, as asked
    assert isinstance(trainer.weighting, EntropyAdaptiveWeighting)  # EAPO's default weighting
    with pytest.warns(UserWarning, match="plain GRPOConfig"):
        explicit = EAPOTrainer(
            model=resolve_model("tiny"),
            reward_funcs=_length_reward,
            args=args,
            train_dataset=_dataset(),
            weighting=make_weighting("psr"),
            split_by="median",
        )
    assert explicit.weighting.weights(1.0) == (1.0, 0.0) and explicit.split_by == "median"
