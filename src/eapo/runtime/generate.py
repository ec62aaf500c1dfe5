"""Sampling ``k`` responses per prompt, with the backend :mod:`eapo.runtime.backends` chooses for the device.

Backends (``--backend``): ``vllm`` (its CUDA build on a GPU, vLLM's CPU build on a CPU); ``paged`` —
transformers' continuous batching (``generate_batch``: paged KV cache, CUDA graphs); ``transformers`` —
``model.generate``, optionally over a static KV cache with a compiled decoding step. ``auto`` is vllm
wherever a build for the device is installed, else paged on a GPU, else transformers (the same order as
``rollout.backend`` in training).

Every backend takes rendered prompt *texts* (the chat template already applied), tokenises them
without adding special tokens (the template holds them), and returns, per prompt, ``k``
:class:`Completion`\\ s. A directory holding ``adapter_config.json`` (a LoRA run's ``final/``) is
loaded through peft on top of the base model it names (merged for speed with transformers and with
vLLM on a CPU, served as a LoRA request with vLLM on a GPU).

Seeding: each ``generate`` call seeds the sampler with the ``seed`` it is given; the harness derives
that seed from the run seed and the first prompt's record id, so a rerun regenerates a batch the same
way on the same hardware and batch size.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from eapo.runtime.stop import cut_text, end_completion, first_stop, stop_token_count

logger = logging.getLogger(__name__)

__all__ = [
    "Completion",
    "Generator",
    "TransformersGenerator",
    "VLLMGenerator",
    "PagedGenerator",
    "make_generator",
    "choose_backend",
    "adapter_base",
    "BACKENDS",
]

BACKENDS = ("auto", "transformers", "vllm", "paged")
#: eval backend name -> rollout backend name (eapo.runtime.backends); ``generate`` is accepted for ``transformers``.
_ROLLOUT_BACKEND_OF = {
    "auto": "auto",
    "transformers": "generate",
    "generate": "generate",
    "vllm": "vllm",
    "paged": "paged",
}


@dataclass(frozen=True)
class Completion:
    """One sampled response: its text (special tokens removed; cut at the end of a stop string), its
    length in tokens, whether it ended before ``max_new_tokens`` (``False``: cut at the cap) and why it
    ended (``stop_reason``: ``string``, ``eos`` or ``cap``, :data:`eapo.runtime.stop.STOP_REASONS`)."""

    text: str
    num_tokens: int
    finished: bool
    stop_reason: str = "eos"


class Generator(Protocol):
    """``generate(prompts, ...) -> [[Completion] * k] * len(prompts)``."""

    backend: str

    def generate(
        self,
        prompts: Sequence[str],
        *,
        k: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
        stop: Sequence[str] = (),
    ) -> list[list[Completion]]: ...


def adapter_base(path: str | Path) -> str | None:
    """The base model a LoRA adapter directory names (``None`` when ``path`` is a full model)."""
    config_file = Path(path) / "adapter_config.json"
    if not config_file.is_file():
        return None
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{config_file}: not valid JSON ({error})") from error
    base = config.get("base_model_name_or_path")
    if not base:
        raise ValueError(
            f"{config_file}: field 'base_model_name_or_path' is missing; cannot load the adapter's base"
        )
    return str(base)


def choose_backend(backend: str = "auto", facts=None) -> str:
    """``auto``: ``"vllm"`` when a vLLM build for this device is installed, else ``"paged"`` on CUDA, else
    ``"transformers"``; an explicit backend is checked against the device (see :func:`eapo.runtime.backends.choose_rollout_backend`)."""
    from eapo.runtime.backends import BackendError, choose_rollout_backend, device_facts

    if backend not in _ROLLOUT_BACKEND_OF:
        raise ValueError(f"unknown generation backend {backend!r}; valid: {', '.join(BACKENDS)}")
    try:
        chosen = choose_rollout_backend(
            _ROLLOUT_BACKEND_OF[backend], facts if facts is not None else device_facts()
        )
    except BackendError as error:
        message = str(error).replace("rollout.backend=", "--backend ")
        raise (ImportError if "package" in message else RuntimeError)(message) from None
    return "transformers" if chosen == "generate" else chosen


def _torch_dtype(dtype: str):
    import torch

    if dtype == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    valid = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in valid:
        raise ValueError(f"unknown dtype {dtype!r}; valid: auto, {', '.join(valid)}")
    return valid[dtype]


class TransformersGenerator:
    """Batched sampling with ``model.generate`` (left padding, ``num_return_sequences=k``).

    Args:
        model_path: a directory or hub id ``from_pretrained`` accepts, or a LoRA adapter directory.
        dtype: ``auto`` (bfloat16 on a GPU, float32 on CPU), ``float32``, ``bfloat16`` or ``float16``.
        device: ``cuda``/``cpu``; default the GPU when there is one.
    """

    backend = "transformers"

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        device: str | None = None,
        attn_implementation: str = "auto",
        cache_implementation: str | None = None,
        compile: bool = False,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from eapo.runtime.backends import DeviceFacts, device_facts, resolve_attention
        from eapo.runtime.models import load_tokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = _torch_dtype(dtype)
        if self.device == "cuda" and torch_dtype == torch.float32:
            torch.backends.cuda.matmul.allow_tf32 = True  # as training (TrainingArguments.tf32)
        facts = device_facts() if self.device == "cuda" else DeviceFacts(cuda=False, vllm=False, paged=False)
        attention = resolve_attention(attn_implementation, str(torch_dtype).removeprefix("torch."), facts)
        load = {"dtype": torch_dtype} | ({"attn_implementation": attention} if attention else {})
        base = adapter_base(model_path)
        if base is not None:
            from peft import PeftModel

            from eapo.runtime.models import resolve_model

            model = AutoModelForCausalLM.from_pretrained(resolve_model(base), **load)
            model = PeftModel.from_pretrained(model, model_path).merge_and_unload()
        else:
            model = AutoModelForCausalLM.from_pretrained(model_path, **load)
        # A static cache holds one fixed-size buffer; on CUDA, transformers then compiles the decode step
        # unless compilation is disabled (plain generate is left as it was).
        self.cache_implementation = cache_implementation
        self.compile = bool(compile and cache_implementation == "static")
        self.model = model.to(self.device).eval()
        self.tokenizer = load_tokenizer(model_path)
        self.tokenizer.padding_side = "left"
        self.eos_token_ids = _eos_token_ids(self.model, self.tokenizer)

    @classmethod
    def from_model(
        cls, model, tokenizer, *, cache_implementation: str | None = None, compile: bool = False
    ) -> TransformersGenerator:
        """Sample from an already loaded model (the policy during training's validation) in its
        current mode and device. The tokenizer is switched to left padding: pass one of its own."""
        generator = cls.__new__(cls)
        generator.model, generator.tokenizer = model, tokenizer
        generator.cache_implementation = cache_implementation
        generator.compile = bool(compile and cache_implementation == "static")
        generator.device = next(model.parameters()).device
        tokenizer.padding_side = "left"
        generator.eos_token_ids = _eos_token_ids(model, tokenizer)
        return generator

    def generate(
        self,
        prompts: Sequence[str],
        *,
        k: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
        stop: Sequence[str] = (),
    ) -> list[list[Completion]]:
        import torch

        encoded = self.tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
        encoded = {name: tensor.to(self.device) for name, tensor in encoded.items()}
        prompt_length = encoded["input_ids"].shape[1]
        sampling = temperature > 0
        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)
        with torch.no_grad():
            output = self.model.generate(
                **encoded,
                do_sample=sampling,
                temperature=temperature if sampling else None,
                top_p=top_p if sampling else None,
                top_k=0 if sampling else None,  # plain temperature / top-p sampling, as TRL's rollouts
                repetition_penalty=1.0,
                max_new_tokens=max_new_tokens,
                num_return_sequences=k,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.eos_token_ids or None,
                cache_implementation=self.cache_implementation,
                disable_compile=not self.compile,
                # each row stops once its text holds a stop string (stop_criteria); _group then cuts every
                # row by eapo.runtime.stop's rule, as on the other backends
                stopping_criteria=stop_criteria(self.tokenizer, stop),
            )  # [len(prompts) * k, prompt_length + new]
        return self._group(output[:, prompt_length:].tolist(), len(prompts), k, stop)

    def _group(
        self, rows: list[list[int]], n_prompts: int, k: int, stop: Sequence[str] = ()
    ) -> list[list[Completion]]:
        """Rows of new token ids (prompt-major, ``k`` per prompt) -> completions, cut at the first EOS or
        after the token that completes the first stop string, whichever comes first
        (:mod:`eapo.runtime.stop`)."""
        return [
            [self._completion(row, stop) for row in rows[prompt_index * k : (prompt_index + 1) * k]]
            for prompt_index in range(n_prompts)
        ]

    def _completion(self, row: list[int], stop: Sequence[str]) -> Completion:
        end = next((i for i, token in enumerate(row) if token in self.eos_token_ids), None)
        ids, text, reason = end_completion(
            row if end is None else row[: end + 1], self._decode, stop, self.eos_token_ids
        )
        return Completion(text=text, num_tokens=len(ids), finished=reason != "cap", stop_reason=reason)

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


class PagedGenerator(TransformersGenerator):
    """Sampling with transformers' continuous batching (``model.generate_batch``): each prompt is
    submitted ``k`` times and the scheduler packs requests into a paged KV cache as others finish.

    ``options`` are ``ContinuousBatchingConfig`` fields (e.g. ``max_memory_percent``). On CUDA the
    backend is warmed up (CUDA graphs captured) on the first call and kept for the next ones; on CPU
    there is nothing to warm up.
    """

    backend = "paged"

    def __init__(
        self, model_path: str, *, dtype: str = "auto", options: dict | None = None, **kwargs
    ) -> None:
        super().__init__(model_path, dtype=dtype, **kwargs)
        self.options = dict(options or {})
        if self.device == "cpu" and not {"max_memory_percent", "num_blocks"} & self.options.keys():
            # transformers 5.17 sizes the paged cache from the machine's free memory when told nothing:
            # 20 GB resident on this 24 GB machine for a tiny model (measured); a tenth is plenty on a CPU
            self.options["max_memory_percent"] = 0.1

    def generate(
        self,
        prompts: Sequence[str],
        *,
        k: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
        stop: Sequence[str] = (),
    ) -> list[list[Completion]]:
        import torch
        from transformers import GenerationConfig
        from transformers.generation import ContinuousBatchingConfig

        ids = [self.tokenizer(text, add_special_tokens=False)["input_ids"] for text in prompts]
        requests = [prompt_ids for prompt_ids in ids for _ in range(k)]  # prompt-major, as generate's rows
        sampling = temperature > 0
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=sampling,
            temperature=temperature if sampling else None,
            top_p=top_p if sampling else None,
            top_k=0 if sampling else None,
            repetition_penalty=1.0,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.eos_token_ids or None,
        )
        torch.manual_seed(seed)
        outputs = self.model.generate_batch(
            requests,
            generation_config=config,
            continuous_batching_config=ContinuousBatchingConfig(**{"seed": seed, **self.options}),
            progress_bar=False,
            warmup=self.device == "cuda",
        )
        results = list(outputs.values())  # in request order (generate_batch re-orders them)
        failed = [r for r in results if r.error is not None]
        if len(results) != len(requests) or failed:
            reason = (
                failed[0].error if failed else f"{len(requests) - len(results)} requests returned nothing"
            )
            raise RuntimeError(
                f"continuous batching failed on {len(failed) or len(requests) - len(results)} of {len(requests)} "
                f"requests ({reason}); rerun with --backend transformers"
            )
        # continuous batching cannot stop at a string: each row runs on to EOS or the cap and is cut here
        return self._group([list(r.generated_tokens) for r in results], len(prompts), k, stop)


class VLLMGenerator:
    """Sampling with vLLM (``SamplingParams(n=k, seed=...)``), on a GPU or with vLLM's CPU build.

    A LoRA adapter is served as a ``LoRARequest`` on a GPU; on a CPU, where vLLM's LoRA kernels decode
    at about 1 token/s, it is merged into its base model first (a temporary directory, removed with the
    generator). ``dtype="auto"`` is the training default for the device (bfloat16 on a GPU, float32 on a
    CPU), never vLLM's own ``auto``, which downcasts float32 checkpoints to bfloat16. On a CPU the KV
    cache gets ``kv_cache_gib`` GiB and the model runs eager unless ``compile=True``.
    """

    backend = "vllm"

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        compile: bool | None = None,
        kv_cache_gib: float = 1.0,
    ) -> None:
        import torch

        from eapo.runtime.models import load_tokenizer, resolve_model
        from eapo.runtime.vllm import cpu_engine_options, start_llm

        cuda = torch.cuda.is_available()
        kwargs: dict = {
            "dtype": str(_torch_dtype(dtype)).removeprefix("torch."),
            "enforce_eager": not (cuda if compile is None else compile),
        }
        if cuda:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        else:
            kwargs.update(cpu_engine_options(kv_cache_gib))
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self.lora_request = None
        self._merged = None
        fix = "Evaluate it with --backend transformers (model.generate), or use a model vLLM supports."
        base = adapter_base(model_path)
        if base is not None and cuda:
            from vllm.lora.request import LoRARequest

            rank = json.loads((Path(model_path) / "adapter_config.json").read_text(encoding="utf-8")).get(
                "r", 16
            )
            supported = (8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's max_lora_rank choices
            max_rank = next((value for value in supported if value >= int(rank)), int(rank))
            self.llm = start_llm(
                resolve_model(base), fix=fix, enable_lora=True, max_lora_rank=max_rank, **kwargs
            )
            self.lora_request = LoRARequest("eapo-adapter", 1, str(model_path))
        elif base is not None:
            self._merged = merge_adapter(model_path, dtype=kwargs["dtype"])
            self.llm = start_llm(self._merged.name, fix=fix, **kwargs)
        else:
            self.llm = start_llm(model_path, fix=fix, **kwargs)
        self.tokenizer = load_tokenizer(model_path)

    @classmethod
    def from_llm(cls, llm, tokenizer) -> VLLMGenerator:
        """Sample from an engine that is already running (training's colocated vLLM, for validation)."""
        generator = cls.__new__(cls)
        generator.llm, generator.tokenizer = llm, tokenizer
        generator.lora_request, generator._merged = None, None
        return generator

    def generate(
        self,
        prompts: Sequence[str],
        *,
        k: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
        stop: Sequence[str] = (),
    ) -> list[list[Completion]]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=k,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_new_tokens,
            seed=seed,
            stop=list(stop) or None,
            include_stop_str_in_output=True,
        )
        token_prompts = [
            {"prompt_token_ids": self.tokenizer(text, add_special_tokens=False)["input_ids"]}
            for text in prompts
        ]
        outputs = self.llm.generate(token_prompts, params, lora_request=self.lora_request, use_tqdm=False)
        return [[self._completion(o, stop) for o in out.outputs] for out in outputs]

    def _completion(self, output, stop: Sequence[str] = ()) -> Completion:
        """Decoded as the transformers backends decode (special tokens skipped, the stop token dropped,
        the text cut at the end of a stop string), so every backend turns the same token ids into the
        same completion. vLLM stops at a string itself and keeps the token that completed it; the cut
        here is :mod:`eapo.runtime.stop`'s rule, which agrees with vLLM's."""
        ids = list(output.token_ids)
        finished = output.finish_reason == "stop"
        if finished and ids and not isinstance(output.stop_reason, str):
            ids = ids[:-1]  # the end-of-sequence or stop token ended it (a stop *string* is not a token)
        kept = stop_token_count(ids, self._decode, stop)
        if kept is not None:
            text, _ = cut_text(self._decode(ids[:kept]), stop)
            return Completion(text=text, num_tokens=kept, finished=True, stop_reason="string")
        reason = "eos" if finished else "cap"
        return Completion(
            text=self._decode(ids), num_tokens=len(output.token_ids), finished=finished, stop_reason=reason
        )

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def make_generator(
    model_path: str,
    *,
    backend: str = "auto",
    dtype: str = "auto",
    cache_implementation: str | None = None,
    compile: bool = False,
    paged_options: dict | None = None,
    vllm_compile: bool | None = None,
    vllm_kv_cache_gib: float = 1.0,
) -> Generator:
    """Load ``model_path`` with the chosen backend (see :func:`choose_backend`). ``cache_implementation``
    and ``compile`` apply to ``transformers``, ``paged_options`` to ``paged``, ``vllm_compile`` (``None``:
    compiled on a GPU, eager on a CPU) and ``vllm_kv_cache_gib`` (a CPU's KV cache) to ``vllm``."""
    chosen = choose_backend(backend)
    logger.info("generating with %s from %s", chosen, model_path)
    if chosen == "vllm":
        return VLLMGenerator(model_path, dtype=dtype, compile=vllm_compile, kv_cache_gib=vllm_kv_cache_gib)
    if chosen == "paged":
        return PagedGenerator(model_path, dtype=dtype, options=paged_options)
    return TransformersGenerator(
        model_path, dtype=dtype, cache_implementation=cache_implementation, compile=compile
    )


def stop_criteria(tokenizer, stops: Sequence[str]):
    """A ``StoppingCriteriaList`` for ``model.generate`` that ends each row once the text it generated holds
    a stop string (``None`` without stop strings), so that ``generate`` stops where vLLM stops.

    transformers' own ``stop_strings`` is not used: it matches the stop string against the vocabulary's
    token strings, and with a byte-level vocabulary (``Ċ`` for a newline) it stopped a row of newlines
    early, before it held ``"\n\n\n"`` (measured on the tiny model). Here the row's last tokens are
    decoded, as :mod:`eapo.runtime.stop` decodes: a window of the longest stop string's length in UTF-8
    bytes plus 8 tokens (every token adds at least one byte), so the check costs the same at every step.
    What it stops is then cut by :func:`eapo.runtime.stop.end_completion`'s rule."""
    if not stops:
        return None
    from transformers import StoppingCriteria, StoppingCriteriaList

    window = max(len(stop.encode("utf-8")) for stop in stops) + 8

    class _StopAtStrings(StoppingCriteria):
        def __init__(self) -> None:
            self.start: int | None = None  # where the generated tokens begin (set at the first call)

        def __call__(self, input_ids, scores, **kwargs):
            import torch

            if self.start is None:
                self.start = input_ids.shape[1] - 1
            tails = input_ids[:, max(self.start, input_ids.shape[1] - window) :].tolist()
            done = [
                first_stop(tokenizer.decode(tail, skip_special_tokens=True), stops) is not None
                for tail in tails
            ]
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([_StopAtStrings()])


def merge_adapter(adapter_dir: str | Path, *, dtype: str = "float32"):
    """The LoRA adapter in ``adapter_dir`` merged into its base model, saved (with the adapter's
    tokenizer) in a ``tempfile.TemporaryDirectory`` that is removed when the returned object is."""
    import tempfile

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from eapo.runtime.models import load_tokenizer, resolve_model

    merged = tempfile.TemporaryDirectory(prefix="eapo-merged-")
    base = AutoModelForCausalLM.from_pretrained(
        resolve_model(adapter_base(adapter_dir)), dtype=getattr(torch, dtype)
    )
    model = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    model.save_pretrained(merged.name, safe_serialization=True)
    load_tokenizer(str(adapter_dir)).save_pretrained(merged.name)
    return merged


def _eos_token_ids(model, tokenizer) -> list[int]:
    """Every id that ends a response: the model's generation config's and the tokenizer's."""
    eos = model.generation_config.eos_token_id
    eos_ids = list(eos) if isinstance(eos, list) else [eos] if eos is not None else []
    if tokenizer.eos_token_id is not None:
        eos_ids.append(tokenizer.eos_token_id)
    return sorted(set(eos_ids))
