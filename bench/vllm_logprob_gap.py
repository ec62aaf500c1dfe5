"""How closely vLLM's CPU build samples from the policy the trainer computes: |p_vLLM − p_HF| per token.

Both engines sample with vLLM and train with a Hugging Face forward, so the gap between the two
forwards is the rollout/training mismatch of every run (verl logs it as
``training/rollout_probs_diff_*``; TRL as ``sampling/sampling_logp_difference/*`` when it computes it).
This samples ``--prompts`` × ``--n`` completions of the demo's prompts with vLLM (fp32, eager, the
sampled token's processed log-prob: after temperature), recomputes each sampled token's log-prob with
the model's fp32 Hugging Face forward at the same temperature, and prints the gap per temperature:
mean and max of |p_vLLM − p_HF|, and of |log p_vLLM − log p_HF|.

    .venv/bin/python bench/vllm_logprob_gap.py [--model smollm2-135m-instruct] [--temperatures 0.7 1.0]
"""

from __future__ import annotations

import argparse
import math


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.7, 1.0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=80)
    options = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM
    from vllm import SamplingParams

    from eapo.config import load_config
    from eapo.data.loaders import load
    from eapo.data.prompts import render_prompts
    from eapo.runtime.models import load_tokenizer, resolve_model
    from eapo.runtime.vllm import cpu_engine_options, start_llm

    path = resolve_model(options.model)
    tokenizer = load_tokenizer(path)
    data = load_config("src/eapo/configs/demo.yaml", []).data
    records = load("demo", split="train")[: options.prompts]
    prompts = list(
        render_prompts(records, tokenizer, data.prompt, response_prefix=data.response_prefix or "")
    )
    llm = start_llm(
        path,
        fix="(bench/vllm_logprob_gap.py)",
        dtype="float32",
        enforce_eager=True,
        seed=0,
        max_model_len=1024,
        logprobs_mode="processed_logprobs",
        **cpu_engine_options(1.0),
    )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    print(
        f"{options.model}: {len(prompts)} prompts x {options.n}, {options.max_tokens} tokens, fp32 on both sides"
    )
    print(
        "| temperature | tokens | mean abs p gap | max abs p gap | mean abs log-p gap | max abs log-p gap |"
    )
    print("|---|---|---|---|---|---|")
    for temperature in options.temperatures:
        params = SamplingParams(
            n=options.n, temperature=temperature, top_p=1.0, max_tokens=options.max_tokens, logprobs=0, seed=0
        )
        p_gaps, lp_gaps = [], []
        for prompt, output in zip(prompts, llm.generate(prompts, params), strict=True):
            prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            for completion in output.outputs:
                ids = list(completion.token_ids)
                vllm_lp = [
                    entry[token].logprob for entry, token in zip(completion.logprobs, ids, strict=True)
                ]
                with torch.no_grad():
                    logits = model(torch.tensor([prompt_ids + ids])).logits[0, len(prompt_ids) - 1 : -1]
                hf_lp = torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(ids)[:, None])[
                    :, 0
                ]
                for a, b in zip(vllm_lp, hf_lp.tolist(), strict=True):
                    p_gaps.append(abs(math.exp(a) - math.exp(b)))
                    lp_gaps.append(abs(a - b))
        print(
            f"| {temperature} | {len(p_gaps)} | {sum(p_gaps) / len(p_gaps):.2e} | {max(p_gaps):.2e} | "
            f"{sum(lp_gaps) / len(lp_gaps):.2e} | {max(lp_gaps):.2e} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
