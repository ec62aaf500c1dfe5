"""Fixtures for the verl plugin tests (run in .venv-verl by `make test-verl`; skipped where verl is absent).

Imports happen inside the fixtures: this file is also collected in the main .venv, which has no verl.
"""

from __future__ import annotations

import os
from typing import Any

import pytest


@pytest.fixture
def verl_config():
    """verl's own default PPO config (``_generated_ppo_trainer.yaml``, the composed ``ppo_trainer``),
    switched to the eapo trainer and estimator. Returns a fresh OmegaConf DictConfig per test."""
    import verl
    from omegaconf import OmegaConf

    path = os.path.join(os.path.dirname(verl.__file__), "trainer", "config", "_generated_ppo_trainer.yaml")
    config = OmegaConf.load(path)
    config.trainer.use_v1 = True
    config.trainer.v1.trainer_mode = "eapo"
    config.algorithm.adv_estimator = "eapo"
    config.actor_rollout_ref.rollout.n = 4
    return config


#: A minimal chat template: each message as "<role>: <content>\n", then "assistant:" to generate.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A whitespace word-level tokenizer with a chat template, built here (no model hub): every word
    in ``words`` has an id, anything else is ``[UNK]``; decoding joins words with spaces."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    words = (
        "<think> </think> <advice> </advice> drink water rest and see a doctor if the fever lasts "
        "reasoning about symptoms user: assistant: question"
    ).split()
    vocab = {"[PAD]": 0, "[UNK]": 1, "[EOS]": 2}
    for word in words:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


class InMemoryTransferQueue:
    """Stands in for the two TransferQueue calls ``PPOTrainer._compute_advantage`` makes
    (``kv_batch_get``, ``kv_batch_put``), without the Ray actors the real one needs.

    Samples are stored per key and field; a get re-assembles them the way TransferQueue's storage
    manager does (``transfer_queue/storage/managers/base.py``): non-tensors as a NonTensorStack,
    0-dim tensors stacked, other tensors as a jagged nested tensor; fields that were never put are
    left out, fields come back sorted by name.
    """

    def __init__(self) -> None:
        self.store: dict[tuple[str, str], dict[str, Any]] = {}

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        from transfer_queue import KVBatchMeta

        if fields is not None:
            for name in fields.keys():
                for i, value in enumerate(_rows(fields.get(name), len(keys))):
                    self.store.setdefault((partition_id, keys[i]), {})[name] = value
        return KVBatchMeta(partition_id=partition_id, keys=list(keys), tags=list(tags or [{} for _ in keys]))

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        import torch
        from tensordict import NonTensorStack, TensorDict

        samples = [self.store[(partition_id, key)] for key in keys]
        names = sorted(select_fields) if select_fields is not None else sorted(samples[0])
        columns = {}
        for name in names:
            if not all(name in sample for sample in samples):
                continue
            chunk = [sample[name] for sample in samples]
            if not all(isinstance(v, torch.Tensor) for v in chunk):
                columns[name] = NonTensorStack(*chunk)
            elif all(v.dim() == 0 for v in chunk):
                columns[name] = torch.stack(chunk)
            else:
                columns[name] = torch.nested.as_nested_tensor(chunk, layout=torch.jagged)
        return TensorDict(columns, batch_size=len(keys))


def _rows(value: Any, n: int) -> list[Any]:
    import torch
    from tensordict import NonTensorStack

    if isinstance(value, torch.Tensor):
        return list(value.unbind(0)) if value.is_nested else [value[i] for i in range(n)]
    if isinstance(value, NonTensorStack):
        return list(value.tolist())
    return list(value)


@pytest.fixture
def in_memory_tq(monkeypatch):
    """Replace ``tq`` inside verl's v1 trainer module with an :class:`InMemoryTransferQueue`."""
    import verl.trainer.ppo.v1.trainer_base as trainer_base

    queue = InMemoryTransferQueue()
    monkeypatch.setattr(trainer_base, "tq", queue)
    return queue
