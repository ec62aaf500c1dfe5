"""Character-level Rouge-L: eapo (rapidfuzz LCS) against rouge-score and rouge-chinese, side by side.

128 pairs of 3,000-character Chinese completions against 500-character references (seeded). Each
implementation scores every pair once; eapo's pass is repeated (it takes milliseconds) and its mean
is used. Prints pairs/second, speed ratios and the largest F1 difference.

Targets (issue 4): F1 identical to 1e-9, and >= 1,000x the pairs/second of rouge-chinese.

rouge-chinese computes F = 2PR / (P + R + 1e-8) while rouge-score and eapo compute the exact
2PR / (P + R); the report shows the raw difference to rouge-chinese's F and the difference once its
formula is applied to eapo's P and R (whose agreement is checked exactly).

    python bench/rouge.py [--pairs 128] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import time

from rouge_chinese import Rouge as RougeChinese
from rouge_score import rouge_scorer

from eapo.rewards.rouge import RougeL, rouge_l_scores

# Common characters of Chinese medical consultations, with punctuation.
ALPHABET = (
    "患者可能是胃炎建议复查血常规腹痛发热咳嗽头晕乏力恶心呕吐腹泻便秘尿频尿急尿痛结石肾脏膀胱前列腺"
    "超声检查治疗药物手术观察饮食休息注意症状诊断医生医院门诊急诊慢性急性感染炎症疼痛部位时间加重缓解"
    "，。、；"
)


class CharTokenizer:
    """rouge-score tokenizer for the paper's character level: one token per non-whitespace character."""

    def tokenize(self, text: str) -> list[str]:
        return [c for c in text if not c.isspace()]


def make_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """(completion, reference): each completion copies its reference's characters in order at a rate drawn
    from [0.02, 0.15] per pair (so the pairs span a range of F1), other characters at random."""
    generator = random.Random(seed)
    pairs = []
    for _ in range(count):
        reference = "".join(generator.choice(ALPHABET) for _ in range(500))
        copy_rate = generator.uniform(0.02, 0.15)
        completion, cursor = [], 0
        for _ in range(3000):
            if generator.random() < copy_rate:
                completion.append(reference[cursor % len(reference)])
                cursor += 1
            else:
                completion.append(generator.choice(ALPHABET))
        pairs.append(("".join(completion), reference))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    pairs = make_pairs(args.pairs, args.seed)
    completions = [completion for completion, _ in pairs]
    references = [reference for _, reference in pairs]

    # eapo: the reward path (RougeL scorer over the batch), repeated for a stable time.
    scorer = RougeL(level="char", extract="whole")
    eapo_f1 = scorer(None, completions, references)
    repeats, start = 0, time.perf_counter()
    while repeats < 5 or time.perf_counter() - start < 1.0:
        scorer(None, completions, references)
        repeats += 1
    eapo_time = (time.perf_counter() - start) / repeats
    eapo_prf = [rouge_l_scores(c, r, level="char") for c, r in pairs]

    # rouge-score with a character tokenizer.
    reference_scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=CharTokenizer())
    start = time.perf_counter()
    rouge_score_results = [reference_scorer.score(r, c)["rougeL"] for c, r in pairs]
    rouge_score_time = time.perf_counter() - start

    # rouge-chinese on space-separated characters (its documented character-level usage).
    chinese = RougeChinese(metrics=["rouge-l"])
    start = time.perf_counter()
    rouge_chinese_results = [chinese.get_scores(" ".join(c), " ".join(r))[0]["rouge-l"] for c, r in pairs]
    rouge_chinese_time = time.perf_counter() - start

    n = len(pairs)
    print(
        f"char-level Rouge-L, {n} pairs: 3,000-char Chinese completions vs 500-char references (seed {args.seed})"
    )
    print(f"{'implementation':<36}{'pairs/s':>12}{'s / pass':>12}{'eapo speed-up':>16}")
    rows = [
        ("eapo RougeL (rapidfuzz LCSseq)", eapo_time),
        ("rouge-score 0.1.2 (char tokenizer)", rouge_score_time),
        ("rouge-chinese 1.0.3", rouge_chinese_time),
    ]
    for name, seconds in rows:
        print(f"{name:<36}{n / seconds:>12.1f}{seconds:>12.4f}{seconds / eapo_time:>15.0f}x")

    diff_rouge_score = max(abs(a - b.fmeasure) for a, b in zip(eapo_f1, rouge_score_results, strict=True))
    identical = sum(a == b.fmeasure for a, b in zip(eapo_f1, rouge_score_results, strict=True))
    diff_chinese_raw = max(abs(a - b["f"]) for a, b in zip(eapo_f1, rouge_chinese_results, strict=True))
    pr_identical = sum(
        (p, r) == (b["p"], b["r"]) for (p, r, _), b in zip(eapo_prf, rouge_chinese_results, strict=True)
    )
    diff_chinese_formula = max(
        abs(2.0 * ((p * r) / (p + r + 1e-8)) - b["f"])
        for (p, r, _), b in zip(eapo_prf, rouge_chinese_results, strict=True)
    )
    f_values = sorted(eapo_f1)
    print(f"F1 range over the pairs: {f_values[0]:.4f} .. {f_values[-1]:.4f}")
    print(f"max |F1 eapo - rouge-score|            = {diff_rouge_score:.3e}  ({identical}/{n} bit-identical)")
    print(
        f"max |F1 eapo - rouge-chinese|          = {diff_chinese_raw:.3e}  (its F adds 1e-8 to the denominator)"
    )
    print(f"rouge-chinese P and R equal to eapo's  : {pr_identical}/{n} pairs exactly")
    print(f"max |its F formula on eapo P,R - its F| = {diff_chinese_formula:.3e}")
    speedup = rouge_chinese_time / eapo_time
    print(
        f"targets: F1 to 1e-9 vs rouge-score: {'PASS' if diff_rouge_score <= 1e-9 else 'FAIL'}; "
        f"vs rouge-chinese: {'PASS' if diff_chinese_raw <= 1e-9 else 'FAIL'} raw, "
        f"{'PASS' if diff_chinese_formula <= 1e-9 and pr_identical == n else 'FAIL'} same formula; "
        f">= 1000x rouge-chinese pairs/s: {'PASS' if speedup >= 1000 else 'FAIL'} ({speedup:.0f}x)"
    )


if __name__ == "__main__":
    main()
