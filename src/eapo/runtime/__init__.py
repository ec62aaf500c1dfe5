"""The rollout runtime: what runs a model to produce text, for training and evaluation alike.

* :mod:`eapo.runtime.models` — where weights come from (tiny random Llama, the embedded SmolLM2, paths,
  hub ids) and the tokenizer;
* :mod:`eapo.runtime.backends` — which generation backend (``vllm``, ``paged``, ``generate``), dtype and
  attention kernel a run uses on this device;
* :mod:`eapo.runtime.vllm` — vLLM's CPU settings, start-up check and environment (no TRL);
* :mod:`eapo.runtime.generate` — generators over those backends (``eapo eval``, in-training validation);
* :mod:`eapo.runtime.vllm_server` — vLLM's OpenAI server as a managed subprocess (the judge).

It sits above :mod:`eapo.core`, :mod:`eapo.rewards` and :mod:`eapo.data` and below the engines
(:mod:`eapo.engines`) and :mod:`eapo.evaluation`; nothing here imports an RL engine.
"""
