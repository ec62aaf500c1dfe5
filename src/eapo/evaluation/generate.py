"""Sampling ``k`` responses per prompt: vLLM when it is installed and a GPU is present, else transformers.

Both backends take rendered prompt *texts* (the chat template already applied), tokenise them
without adding special tokens (the template holds them), and return, per prompt, ``k``
:class:`Completion`\\ s. A directory holding ``adapter_config.json`` (a LoRA run's ``final/``) is
loaded through peft on top of the base model it names (merged for speed with transformers, served as
a LoRA request with vLLM).

Seeding: each ``generate`` call seeds the sampler with the ``seed`` it is given; the harness derives
that seed from the run seed and the first prompt's record id, so a rerun regenerates a batch the same
way on the same hardware and batch size.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)

__all__ = [
    "Completion",
    "Generator",
    "TransformersGenerator",
    "VLLMGenerator",
    "make_generator",
    "choose_backend",
    "adapter_base",
    "BACKENDS",
]

BACKENDS = ("auto", "transformers", "vllm")


@dataclass(frozen=True)
class Completion:
    """One sampled response: its text (special tokens removed), its length in tokens, and whether it
    ended with an end-of-sequence token (``False``: cut at ``max_new_tokens``)."""

    text: str
    num_tokens: int
    finished: bool


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


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def choose_backend(backend: str = "auto") -> str:
    """``"vllm"`` when asked for or (``auto``) when vllm is importable and CUDA is present, else ``"transformers"``."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown generation backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if backend == "auto":
        return (
            "vllm" if importlib.util.find_spec("vllm") is not None and _cuda_available() else "transformers"
        )
    if backend == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ImportError(
                "--backend vllm needs the vllm package: pip install 'eapo[vllm]' (and a CUDA GPU)"
            )
        if not _cuda_available():
            raise RuntimeError("--backend vllm needs a CUDA GPU; use --backend transformers on this machine")
    return backend


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

    def __init__(self, model_path: str, *, dtype: str = "auto", device: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from eapo.models import load_tokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = _torch_dtype(dtype)
        base = adapter_base(model_path)
        if base is not None:
            from peft import PeftModel

            from eapo.models import resolve_model

            model = AutoModelForCausalLM.from_pretrained(resolve_model(base), dtype=torch_dtype)
            model = PeftModel.from_pretrained(model, model_path).merge_and_unload()
        else:
            model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype)
        self.model = model.to(self.device).eval()
        self.tokenizer = load_tokenizer(model_path)
        self.tokenizer.padding_side = "left"
        eos = self.model.generation_config.eos_token_id
        eos_ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
        if self.tokenizer.eos_token_id is not None:
            eos_ids.append(self.tokenizer.eos_token_id)
        self.eos_token_ids = sorted(set(eos_ids))

    @classmethod
    def from_model(cls, model, tokenizer) -> TransformersGenerator:
        """Sample from an already loaded model (the policy during training's validation) in its
        current mode and device. The tokenizer is switched to left padding: pass one of its own."""
        generator = cls.__new__(cls)
        generator.model, generator.tokenizer = model, tokenizer
        generator.device = next(model.parameters()).device
        tokenizer.padding_side = "left"
        eos = model.generation_config.eos_token_id
        eos_ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
        eos_ids = [*eos_ids, *([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])]
        generator.eos_token_ids = sorted(set(eos_ids))
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
            )  # [len(prompts) * k, prompt_length + new]
        new_tokens = output[:, prompt_length:].tolist()
        completions: list[list[Completion]] = []
        for prompt_index in range(len(prompts)):
            group = []
            for row in new_tokens[prompt_index * k : (prompt_index + 1) * k]:
                end = next((i for i, token in enumerate(row) if token in self.eos_token_ids), None)
                tokens = row if end is None else row[: end + 1]
                text = self.tokenizer.decode(row if end is None else row[:end], skip_special_tokens=True)
                group.append(Completion(text=text, num_tokens=len(tokens), finished=end is not None))
            completions.append(group)
        return completions


class VLLMGenerator:
    """Sampling with vLLM (``SamplingParams(n=k, seed=...)``); LoRA adapters served as a ``LoRARequest``."""

    backend = "vllm"

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
    ) -> None:
        from vllm import LLM

        from eapo.models import load_tokenizer, resolve_model

        base = adapter_base(model_path)
        kwargs: dict = {"dtype": dtype, "gpu_memory_utilization": gpu_memory_utilization}
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self.lora_request = None
        if base is not None:
            from vllm.lora.request import LoRARequest

            rank = json.loads((Path(model_path) / "adapter_config.json").read_text(encoding="utf-8")).get(
                "r", 16
            )
            supported = (8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's max_lora_rank choices
            max_rank = next((value for value in supported if value >= int(rank)), int(rank))
            self.llm = LLM(model=resolve_model(base), enable_lora=True, max_lora_rank=max_rank, **kwargs)
            self.lora_request = LoRARequest("eapo-adapter", 1, str(model_path))
        else:
            self.llm = LLM(model=model_path, **kwargs)
        self.tokenizer = load_tokenizer(model_path)

    def generate(
        self,
        prompts: Sequence[str],
        *,
        k: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
    ) -> list[list[Completion]]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=k, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=seed
        )
        token_prompts = [
            {"prompt_token_ids": self.tokenizer(text, add_special_tokens=False)["input_ids"]}
            for text in prompts
        ]
        outputs = self.llm.generate(token_prompts, params, lora_request=self.lora_request, use_tqdm=False)
        return [
            [
                Completion(text=o.text, num_tokens=len(o.token_ids), finished=o.finish_reason == "stop")
                for o in out.outputs
            ]
            for out in outputs
        ]


def make_generator(model_path: str, *, backend: str = "auto", dtype: str = "auto") -> Generator:
    """Load ``model_path`` with the chosen backend (see :func:`choose_backend`)."""
    chosen = choose_backend(backend)
    logger.info("generating with %s from %s", chosen, model_path)
    if chosen == "vllm":
        return VLLMGenerator(model_path, dtype=dtype)
    return TransformersGenerator(model_path, dtype=dtype)
