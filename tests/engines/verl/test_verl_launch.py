"""``eapo train --engine verl``'s translation, without running verl: the typed config as ``main_ppo``'s
overrides (:func:`eapo.engines.verl.launch.verl_overrides`), what verl cannot honour, the prompt text,
and verl's metrics as ``metrics.jsonl`` rows. The real runs are in ``test_verl_cpu_train.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eapo.config import ConfigError, load_config
from eapo.core import STEP_SETTINGS, WEIGHT_SETTINGS, methods
from eapo.engines.verl.launch import (
    LOSS_AGG_MODES,
    METRIC_KEYS,
    VerlLayout,
    _MetricsFollower,
    algorithm_section,
    hydra_value,
    prefixed_chat_template,
    verl_metrics_row,
    verl_overrides,
    verl_problems,
)
from eapo.engines.verl.settings import algorithm_for_trainer, estimator_of

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "src" / "eapo" / "configs" / "demo.yaml"


def overrides_of(config, tmp_path: Path, *, cpu: bool = True, adapter: Path | None = None) -> dict[str, str]:
    layout = VerlLayout(tmp_path / "run")
    args = verl_overrides(
        config,
        layout,
        model_dir=tmp_path / "model",
        adapter=adapter,
        data={"train": tmp_path / "train.parquet", "val": tmp_path / "val.parquet"},
        num_rows=8,
        resume=False,
        cpu=cpu,
    )
    parsed: dict[str, str] = {}
    for arg in args:
        key, value = arg.split("=", 1)
        assert key not in parsed, f"{key} set twice"
        parsed[key] = value
    return parsed


def test_the_demo_runs_the_papers_objective_with_every_option_explicit(tmp_path):
    args = overrides_of(load_config(DEMO), tmp_path)
    actor = "actor_rollout_ref.actor"
    expected = {
        "trainer.v1.trainer_mode": "eapo",
        "algorithm.adv_estimator": "eapo",
        "+algorithm.eapo.method": "'eapo'",
        "+algorithm.eapo.w0": "1.0",
        "+algorithm.eapo.w_min": "0.0",
        "+algorithm.eapo.w_max": "2.0",
        "+algorithm.eapo.w_neg": "1.0",
        "+algorithm.eapo.split_by": "'mean'",
        "algorithm.norm_adv_by_std_in_grpo": "True",
        "algorithm.use_kl_in_reward": "False",
        # the paper's objective: 1/|y_i| aggregation, k3 KL loss at beta, symmetric clip, one update per batch
        f"{actor}.loss_agg_mode": "seq-mean-token-mean",
        f"{actor}.use_kl_loss": "True",
        f"{actor}.kl_loss_coef": "0.001",
        f"{actor}.kl_loss_type": "low_var_kl",
        f"{actor}.clip_ratio_low": "0.2",
        f"{actor}.clip_ratio_high": "0.2",
        f"{actor}.clip_ratio_c": "1000000000.0",  # no dual clip
        f"{actor}.ppo_epochs": "1",
        f"{actor}.ppo_mini_batch_size": "2",
        f"{actor}.entropy_coeff": "0",
        # verl's defaults that are not the config's: weight decay 0.01, bf16
        f"{actor}.optim.weight_decay": "0.0",
        f"{actor}.optim.lr": "0.001",
        f"{actor}.optim.lr_scheduler_type": "constant",
        f"{actor}.grad_clip": "1.0",
        f"{actor}.fsdp_config.model_dtype": "fp32",
        f"+{actor}.fsdp_config.mixed_precision": "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "+actor_rollout_ref.ref.fsdp_config.mixed_precision": "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "actor_rollout_ref.rollout.dtype": "float32",
        "actor_rollout_ref.rollout.n": "4",
        "actor_rollout_ref.rollout.temperature": "0.7",
        "algorithm.rollout_correction.rollout_is": "null",
        "data.train_batch_size": "2",
        "data.max_response_length": "80",
        "trainer.total_training_steps": "12",
        "trainer.save_freq": "3",
        "trainer.resume_mode": "disable",
        # eapo's reward, with the format check's prefix from data.response_prefix
        "reward.custom_reward_function.path": "pkg://eapo.engines.verl",
        "+reward.custom_reward_function.reward_kwargs.weights.format": "0.5",
        "+reward.custom_reward_function.reward_kwargs.weights.rouge_l": "0.25",
        "+reward.custom_reward_function.reward_kwargs.options.format.prefix": "'<think>'",
        "+reward.custom_reward_function.reward_kwargs.options.reranker.backend": "'bi-encoder'",
        "+reward.custom_reward_function.reward_kwargs.missing": "'unscorable'",
        # eapo's CPU platform
        "trainer.device": "cpu",
    }
    assert {key: args.get(key) for key in expected} == expected


def test_verls_loss_is_the_papers_ppo_clip_without_dual_clip(tmp_path):
    """verl's ``vanilla`` loss under the launch's settings, on tokens with A < 0 and ρ above verl's default
    dual-clip bound (3): the paper's PPO-clip (eapo.core's, loss and gradient), not the dual clip's
    ``−3·A`` cap, which verl's default would apply."""
    pytest.importorskip("verl")
    import torch
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import ActorConfig

    from eapo.core import aggregate_loss, ppo_clip_per_token

    args = overrides_of(load_config(DEMO), tmp_path)
    actor = "actor_rollout_ref.actor"
    agg = args[f"{actor}.loss_agg_mode"]
    clip = {
        key: float(args[f"{actor}.{key}"]) for key in ("clip_ratio_low", "clip_ratio_high", "clip_ratio_c")
    }
    ratios = torch.tensor([[0.5, 1.0, 5.0, 100.0], [0.5, 1.0, 5.0, 1e8]], dtype=torch.float64)
    advantages = torch.tensor([[-1.0] * 4, [2.0] * 4], dtype=torch.float64)  # [B, T]
    old_logp = torch.full_like(ratios, -2.0)
    mask = torch.ones_like(ratios)

    def verls(clip_ratio_c):
        settings = {**clip, "clip_ratio_c": clip_ratio_c}
        config = ActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=2, **settings)
        logp = (old_logp + ratios.log()).requires_grad_(True)
        loss, _ = get_policy_loss_fn("vanilla")(old_logp, logp, advantages, mask, agg, config)
        loss.backward()
        return loss, logp.grad

    logp = (old_logp + ratios.log()).requires_grad_(True)
    per_token = ppo_clip_per_token(
        logp, old_logp, advantages, clip_low=clip["clip_ratio_low"], clip_high=clip["clip_ratio_high"]
    )
    papers = aggregate_loss(per_token, mask, agg)
    papers.backward()
    # by hand: A = -1 gives max(ρ, clip(ρ, 0.8, 1.2)) = (0.8, 1, 5, 100); A = 2 gives -2·min(ρ, 1.2)
    expected = ((0.8 + 1.0 + 5.0 + 100.0) / 4 + (-2.0 * (0.5 + 1.0 + 1.2 + 1.2)) / 4) / 2
    assert papers.item() == pytest.approx(expected, rel=1e-12)
    loss, grad = verls(clip["clip_ratio_c"])
    torch.testing.assert_close(loss, papers, rtol=1e-7, atol=0)  # verl's aggregation rounds at 1e-9
    torch.testing.assert_close(grad, logp.grad, rtol=1e-7, atol=0)
    dual_clipped, _ = verls(3.0)  # verl's default caps the A < 0 tokens at 3: (0.8, 1, 3, 3)
    assert dual_clipped.item() == pytest.approx(((0.8 + 1.0 + 3.0 + 3.0) / 4 - 3.9 / 2) / 2, rel=1e-12)


def test_every_plain_override_is_a_key_of_verls_config(tmp_path):
    """Hydra refuses a key absent from verl's schema unless it is added with ``+``: every override
    without ``+`` must name a key of verl 0.9.1's composed config."""
    verl = pytest.importorskip("verl")
    from omegaconf import DictConfig, OmegaConf

    schema = OmegaConf.load(
        os.path.join(os.path.dirname(verl.__file__), "trainer", "config", "_generated_ppo_trainer.yaml")
    )
    config = load_config(DEMO, ["rollout.vllm_importance_correction=token_truncate"])
    for cpu in (True, False):
        for key in overrides_of(config, tmp_path, cpu=cpu, adapter=tmp_path / "adapter"):
            if key.startswith("+"):
                continue
            node = schema
            for part in key.split("."):
                assert isinstance(node, DictConfig) and part in node.keys(), key  # keys(): "???" values too
                node = node._get_node(part)


def test_the_overrides_compose_into_verls_config_and_its_engines_compute_in_fp32(tmp_path):
    """Hydra composes verl 0.9.1's ``ppo_trainer`` with every override (a ``+`` key that verl already
    has would be refused), and the FSDP engines of the actor and the reference resolve float32 compute:
    verl's FSDP engine otherwise runs its forward and backward in bf16 under autocast whatever dtype the
    weights were loaded in, which the demo on verl showed as a 1% vLLM/FSDP probability gap at step 1."""
    verl = pytest.importorskip("verl")
    import torch
    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.torch_dtypes import PrecisionType

    config = load_config(DEMO, [])
    args = verl_overrides(
        config,
        VerlLayout(tmp_path / "run"),
        model_dir=tmp_path / "model",
        adapter=tmp_path / "adapter",
        data={"train": tmp_path / "train.parquet", "val": tmp_path / "val.parquet"},
        num_rows=8,
        resume=False,
        cpu=True,
    )
    with initialize_config_dir(
        os.path.join(os.path.dirname(verl.__file__), "trainer", "config"), version_base=None
    ):
        composed = compose("ppo_trainer", overrides=args)
    for role in ("actor", "ref"):
        engine = omega_conf_to_dataclass(composed.actor_rollout_ref[role].fsdp_config)
        assert PrecisionType.to_dtype(engine.model_dtype) == torch.float32, role
        assert {k: PrecisionType.to_dtype(v) for k, v in engine.mixed_precision.items()} == {
            "param_dtype": torch.float32,
            "reduce_dtype": torch.float32,
            "buffer_dtype": torch.float32,
        }, role
    assert composed.actor_rollout_ref.rollout.dtype == "float32"
    assert composed.actor_rollout_ref.rollout.logprobs_mode == "processed_logprobs"


@pytest.mark.parametrize("method", methods())
def test_the_plugin_reads_the_section_as_the_config_means_it(method):
    """Every method's ``algorithm.eapo`` section is accepted by the plugin's own reader, which resolves
    the same scheme, weights and control values as the typed config."""
    config = load_config(
        DEMO,
        [f"algorithm.method={method}", "algorithm.w0=null", "algorithm.w_min=null", "algorithm.w_max=null"],
    )
    section = algorithm_section(config)
    read = algorithm_for_trainer(
        {"adv_estimator": estimator_of(config.algorithm.weighting_method()), "eapo": section}
    )
    tree = config.algorithm.resolved()
    assert read.method == tree.method == method
    assert read.scheme == tree.scheme == config.algorithm.weighting_method()
    weights = read.make_weighting()
    for key in set(section) & set(WEIGHT_SETTINGS):
        assert getattr(weights, key) == section[key], key
    for key in STEP_SETTINGS:
        assert getattr(read, key) == getattr(config.algorithm, key), key
    assert read.control_values() == tree.control_values()
    assert (read.weights, read.step_settings()) == (tree.weights, tree.step_settings())


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("rollout.backend=generate", "rollout.backend"),
        ("algorithm.scale_rewards=batch", "algorithm.scale_rewards"),
        ("algorithm.kl_bias_correction=true", "algorithm.kl_bias_correction"),
        ("algorithm.loss_type=cispo", "algorithm.loss_type"),
        ("train.lr_scheduler=linear", "train.lr_scheduler"),
        ("train.max_steps=-1", "train.max_steps"),
        ("rollout.vllm_importance_correction=token_mask", "rollout.vllm_importance_correction"),
        ('rollout.stop=["${x}"]', "rollout.stop"),  # Hydra would read it as an interpolation
        ("verl.workers=3", "verl.workers=3"),  # 2 prompts x 4 rollouts do not split over 3 workers
    ],
)
def test_a_setting_verl_cannot_honour_is_refused_before_anything_is_written(tmp_path, override, named):
    from eapo.train import run

    config = load_config(DEMO, ["engine=verl", override])
    problems = verl_problems(config)
    assert len(problems) == 1 and problems[0].startswith(named), problems
    with pytest.raises(ConfigError, match="cannot run on verl: " + named.replace(".", r"\.")):
        run(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_workers_are_verls_gpus_per_node_and_ray_gets_as_many(tmp_path):
    """verl.workers sets trainer.n_gpus_per_node (one FSDP worker and one vLLM replica per logical GPU)
    and, on a CPU, as many logical GPUs for Ray; unset it is 1 on a CPU. The step's completions must
    split over the workers in whole micro-batches."""
    base = ["engine=verl", "train.prompts_per_step=2", "rollout.num_generations=4"]
    one = overrides_of(load_config(DEMO, [*base, "train.micro_batch_size=4"]), tmp_path)
    assert (one["trainer.n_gpus_per_node"], one["+ray_kwargs.ray_init.num_gpus"]) == ("1", "1")
    config = load_config(DEMO, [*base, "verl.workers=2", "train.micro_batch_size=4"])
    assert verl_problems(config) == []
    two = overrides_of(config, tmp_path)
    assert (two["trainer.n_gpus_per_node"], two["+ray_kwargs.ray_init.num_gpus"]) == ("2", "2")
    assert int(two["ray_kwargs.ray_init.num_cpus"]) >= 3 * 2 + 2  # a bundle of 3 per worker, the loops
    (problem,) = verl_problems(load_config(DEMO, [*base, "verl.workers=2", "train.micro_batch_size=8"]))
    assert problem.startswith("verl.workers=2") and "train.micro_batch_size=8" in problem
    with pytest.raises(ConfigError, match=r"verl.workers=0 is invalid; valid: an integer >= 1"):
        load_config(DEMO, ["verl.workers=0"])


def test_more_workers_than_gpus_is_refused_naming_the_setting(tmp_path):
    from eapo.engines.verl.launch import num_workers

    config = load_config(DEMO, ["engine=verl", "verl.workers=64"])
    assert num_workers(config, cpu=True) == 64
    with pytest.raises(ConfigError, match=r"verl.workers=64 but \d+ GPUs are present"):
        num_workers(config, cpu=False)
    assert num_workers(load_config(DEMO, ["engine=verl"]), cpu=True) == 1


def test_loss_types_map_to_the_same_aggregation():
    from eapo.config import LOSS_TYPES

    assert LOSS_AGG_MODES["grpo"] == "seq-mean-token-mean"  # the paper's 1/|y_i|
    assert LOSS_AGG_MODES["bnpo"] == "token-mean"
    assert set(LOSS_AGG_MODES) <= set(LOSS_TYPES)


@pytest.mark.parametrize("prefix", ["<think>", 'say "hi"\n', "{{ not jinja }}"])
def test_the_prefixed_template_renders_the_trl_engines_prompt(prefix):
    """verl renders ``apply_chat_template(messages, add_generation_prompt=True)``; the TRL engine
    renders the same plus ``data.response_prefix``. The prefixed template gives the TRL text."""
    from eapo.runtime.models import build_byte_tokenizer

    tokenizer = build_byte_tokenizer()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "why rest?"}]
    plain = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    history = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    tokenizer.chat_template = prefixed_chat_template(tokenizer.chat_template, prefix)
    assert (
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == plain + prefix
    )
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False) == history
    assert prefixed_chat_template("T", "") == "T"


def test_an_over_long_question_is_cut_as_on_trl_so_verl_never_cuts_a_prompt(tmp_path):
    """verl 0.9.1's agent loop cuts a prompt over ``data.max_prompt_length`` from the left (the chat
    template's opening and the instructions first). ``write_data`` cuts the question instead, by the TRL
    engine's rule: every exported prompt, as verl renders it (the response prefix in its template), is the
    TRL engine's prompt, within ``data.max_prompt_tokens``, its instructions whole."""
    import pyarrow.parquet as pq

    from eapo.data import get_messages, load, render_prompts
    from eapo.engines.verl.launch import prepare_model, write_data
    from eapo.runtime.models import load_tokenizer, tiny_model_path

    model = str(tiny_model_path())
    config = load_config(DEMO, ["train.eval_limit=4"])
    data = config.data
    records = load(data.name, data.path, split=data.split, limit=data.limit, **data.options)
    whole = render_prompts(records, load_tokenizer(model), data.prompt, response_prefix=data.response_prefix)
    lengths = sorted(
        len(load_tokenizer(model)(text, add_special_tokens=False)["input_ids"]) for text in whole
    )
    limit = lengths[len(lengths) // 2]  # half the questions are too long
    config = load_config(DEMO, ["train.eval_limit=4", f"data.max_prompt_tokens={limit}"])
    layout = VerlLayout(tmp_path / "run")
    written = write_data(config, layout, model)
    verl_tokenizer = load_tokenizer(str(prepare_model(config, layout, model)))
    trl = render_prompts(
        records, load_tokenizer(model), data.prompt, limit, response_prefix=data.response_prefix
    )
    assert 0 < len(trl.truncated) < len(records)
    rows = pq.read_table(written["train"]).to_pylist()
    instructions = get_messages(data.prompt)[0]["content"]
    for row, record, text in zip(rows, records, trl, strict=True):
        rendered = verl_tokenizer.apply_chat_template(
            row["prompt"], add_generation_prompt=True, tokenize=False
        )
        assert rendered == text and instructions in rendered
        assert len(verl_tokenizer(rendered, add_special_tokens=False)["input_ids"]) <= limit
        assert row["extra_info"]["question"] == record.question  # the judge reads the whole question


def test_hydra_values_keep_strings_strings():
    assert hydra_value("<think>") == "'<think>'"
    assert hydra_value("a,b") == "'a,b'"
    assert hydra_value("it's") == "'it\\'s'"
    assert hydra_value(None) == "null"
    assert hydra_value(True) == "true"
    assert hydra_value(0.25) == "0.25"
    assert hydra_value(["x", 1]) == "['x',1]"
    # Hydra keeps a backslash as written unless a run of them ends at a quote (escaped or closing)
    assert hydra_value("a\\n") == "'a\\n'"
    assert hydra_value("a\\") == "'a\\\\'"
    assert hydra_value("b\\'c") == "'b\\\\\\'c'"


def test_a_verl_step_becomes_a_row_with_eapos_keys():
    row = verl_metrics_row(
        3,
        {
            "critic/score/mean": 0.4,
            "response_length/mean": 61.0,
            "actor/kl_loss": 0.002,
            "actor/pg_loss": -0.01,
            "actor/lr": 1e-3,
            "eapo/w_pos": 0.19,
            "entropy/rollout": 1.1,
            "note": "text is dropped",
        },
    )
    assert row["step"] == 3
    assert row["reward/mean"] == 0.4 and row["critic/score/mean"] == 0.4
    assert row["completion/mean_length"] == 61.0
    assert row["kl"] == 0.002 and row["loss"] == -0.01 and row["learning_rate"] == 1e-3
    assert row["eapo/w_pos"] == 0.19 and row["entropy/rollout"] == 1.1
    assert "note" not in row
    assert {"reward/mean", "completion/mean_length", "kl", "loss", "learning_rate"} <= set(
        METRIC_KEYS.values()
    )


def test_the_follower_appends_each_logged_step_once(tmp_path, caplog):
    """verl logs one record per step (validation included) after the step's checkpoint: each is
    appended as soon as its line is complete; steps up to the resumed checkpoint are not written again."""
    source, target = tmp_path / "verl.jsonl", tmp_path / "metrics.jsonl"
    follower = _MetricsFollower(source, target, after_step=1)

    def log(step, data):
        with source.open("a") as handle:
            handle.write(json.dumps({"step": step, "data": data}) + "\n")

    def rows():
        return [json.loads(line) for line in target.read_text().splitlines()] if target.exists() else []

    log(1, {"critic/score/mean": 0.1})  # before the checkpoint resumed from: skipped
    follower.poll()
    assert rows() == []
    log(2, {"critic/score/mean": 0.2, "val-core/x/reward/mean@1": 0.5})
    with source.open("a") as handle:
        handle.write('{"step": 3, "da')  # torn: the logger is mid-write
    follower.poll()
    assert rows() == [
        {"step": 2, "critic/score/mean": 0.2, "reward/mean": 0.2, "val-core/x/reward/mean@1": 0.5}
    ]
    with source.open("a") as handle:
        handle.write('ta": {"critic/score/mean": 0.3}}\n')
    log(3, {"critic/score/mean": 0.9})  # a second record of a step: kept out, with a warning
    follower.poll()
    assert [(row["step"], row["reward/mean"]) for row in rows()] == [(2, 0.2), (3, 0.3)]
    assert "logged step 3 twice" in caplog.text


def test_a_resume_puts_back_the_steps_a_kill_left_out_of_metrics_jsonl(tmp_path):
    """verl logs a step after its checkpoint and validation: killed in between, the run resumes after a
    step metrics.jsonl never saw. The resume puts it back from verl's log of the earlier launch, or
    from the checkpoint's own record of the step; steps past the checkpoint are cut."""
    from eapo.engines.verl.launch import restore_metrics
    from eapo.run_dir import STEP_METRICS_FILE

    layout = VerlLayout(tmp_path / "run")
    (layout.checkpoints / "global_step_3").mkdir(parents=True)
    (layout.run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.1}) + "\n")
    (layout.verl_metrics(0)).write_text(
        "".join(json.dumps({"step": s, "data": {"critic/score/mean": s / 10}}) + "\n" for s in (1, 2))
        + '{"step": 3, "data": {"critic/sc'  # torn by the kill
    )
    (layout.checkpoints / "global_step_3" / STEP_METRICS_FILE).write_text(
        json.dumps({"step": 3, "data": {"critic/score/mean": 0.3, "eapo/w_pos": 0.2}})
    )
    (layout.verl_metrics(1)).write_text(json.dumps({"step": 4, "data": {"critic/score/mean": 0.4}}) + "\n")
    assert restore_metrics(layout, 3) == [2, 3]
    rows = [json.loads(line) for line in (layout.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(row["step"], row["reward/mean"]) for row in rows] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert rows[2]["eapo/w_pos"] == 0.2
    assert restore_metrics(layout, 2) == []  # nothing missing: step 3 cut
    assert [
        json.loads(line)["step"] for line in (layout.run_dir / "metrics.jsonl").read_text().splitlines()
    ] == [1, 2]


@pytest.mark.parametrize(
    ("log", "reason"),
    [
        (  # Hydra refuses an override: its message, not its hint
            "UserWarning: megatron engine is not available: ModuleNotFoundError('megatron')\n"
            "Could not append to config. An item is already at 'a.b'.\n\n"
            "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n",
            "Could not append to config. An item is already at 'a.b'.",
        ),
        (  # the last raised error, not a warning that names an exception type
            "UserWarning: x is not available: ModuleNotFoundError('x')\n"
            "Traceback (most recent call last):\n"
            '  File "verl/trainer/main_ppo.py", line 1, in <module>\n'
            "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n",
            "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        ),
        (
            "step 1 done\nthe worker was killed by SIGKILL\nshutting down\n",
            "the worker was killed by SIGKILL",
        ),
    ],
)
def test_a_failed_run_names_the_error_from_its_log(tmp_path, log, reason):
    from eapo.engines.verl.launch import _failure_reason

    path = tmp_path / "main_ppo.log"
    path.write_text(log)
    assert _failure_reason(path) == reason
    assert _failure_reason(tmp_path / "missing.log") == "no output"


def test_the_trained_adapter_is_rebuilt_from_verls_export_of_the_lora_actor(tmp_path):
    """verl 0.9.1 exports a LoRA actor as the peft model's whole state dict (``….lora_A.default.weight``)
    and no adapter: ``trained_adapter`` writes peft's adapter from it, which peft loads back with the
    trained values (the demo on verl found the missing adapter at its final save)."""
    import torch
    from peft import PeftModel, get_peft_model
    from safetensors.torch import save_file

    from eapo.engines.verl.launch import trained_adapter
    from eapo.runtime.models import build_tiny_model, lora_config

    config = load_config(ROOT / "configs" / "tiny.yaml", ["model.lora.enabled=true", "model.lora.r=4"])
    model, _ = build_tiny_model()
    model.save_pretrained(tmp_path / "base")
    peft = get_peft_model(model, lora_config(config, str(tmp_path / "base")))
    peft.save_pretrained(tmp_path / "initial")  # the adapter the run starts from (B = 0)
    with torch.no_grad():  # "training": every B moves
        for name, parameter in peft.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn_like(parameter))
    export = tmp_path / "huggingface"
    export.mkdir()
    state = {k: v.clone() for k, v in peft.state_dict().items() if not k.endswith("lm_head.weight")}  # tied
    assert any(k.endswith("lora_A.default.weight") for k in state)  # verl's names, as in the demo's export
    save_file(state, str(export / "model.safetensors"))

    written = trained_adapter(export, tmp_path / "initial" / "adapter_config.json", tmp_path / "final")
    assert written == sum("lora_" in k for k in state)
    base, _ = build_tiny_model()
    loaded = PeftModel.from_pretrained(base, str(tmp_path / "final"))
    trained = dict(peft.named_parameters())
    for name, parameter in loaded.named_parameters():
        if "lora_" in name:
            assert torch.equal(parameter, trained[name]), name

    (tmp_path / "empty").mkdir()
    save_file({"model.embed_tokens.weight": torch.zeros(2, 2)}, str(tmp_path / "empty" / "model.safetensors"))
    with pytest.raises(Exception, match="holds no LoRA tensors"):
        trained_adapter(tmp_path / "empty", tmp_path / "initial" / "adapter_config.json", tmp_path / "x")
