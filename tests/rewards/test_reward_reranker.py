"""The reranker reward: the offline bi-encoder stand-in (the real all-MiniLM-L6-v2) and the auto fallback."""

from __future__ import annotations

import logging

import pytest

from eapo.rewards import make_reward
from eapo.rewards.reranker import Reranker

PAIRS = [
    # (reference = query, related completion, unrelated completion)
    (
        "Chronic gastritis; take a proton pump inhibitor and avoid spicy food.",
        "<think>…</think><advice>This looks like gastritis. Use omeprazole and avoid spicy meals.</advice>",
        "<think>…</think><advice>The football match ended two to one after extra time.</advice>",
    ),
    (
        "Likely a urinary tract infection; do a urine culture and start antibiotics.",
        "<advice>Probably a bladder infection: get a urine test and a course of antibiotics.</advice>",
        "<advice>Paint the fence with two coats of weatherproof varnish.</advice>",
    ),
    (
        "Kidney stone suspected; CT scan, drink plenty of water, pain relief.",
        "<advice>A renal stone is likely. Get a CT and drink lots of fluids; take painkillers.</advice>",
        "<advice>The recipe needs flour, sugar and three eggs.</advice>",
    ),
    (
        "Eczema; use moisturiser and a mild topical steroid.",
        "<advice>Atopic dermatitis: apply emollients and a low-potency steroid cream.</advice>",
        "<advice>Quarterly revenue grew by eight percent year over year.</advice>",
    ),
]


@pytest.fixture(scope="module")
def bi_encoder() -> Reranker:
    return make_reward("reranker", backend="bi-encoder")


def test_bi_encoder_scores_related_above_unrelated(bi_encoder: Reranker) -> None:
    references = [reference for reference, _, _ in PAIRS for _ in range(2)]
    completions = [completion for _, related, unrelated in PAIRS for completion in (related, unrelated)]
    scores = bi_encoder(None, completions, references)
    assert all(score is not None and 0.0 <= score <= 1.0 for score in scores)
    for index in range(len(PAIRS)):
        related, unrelated = scores[2 * index], scores[2 * index + 1]
        assert related > unrelated + 0.2, (index, related, unrelated)
        assert related > 0.4 and unrelated < 0.3
    # the same text as query and document is (numerically) a perfect match
    assert bi_encoder(None, ["<advice>Eczema; use moisturiser.</advice>"], ["Eczema; use moisturiser."])[
        0
    ] == pytest.approx(1.0, abs=1e-5)


def test_bi_encoder_is_labelled_as_a_stand_in_and_handles_missing_inputs(bi_encoder: Reranker) -> None:
    assert bi_encoder.name == "reranker" and bi_encoder.backend == "bi-encoder"
    assert bi_encoder.label == (
        "bi-encoder stand-in (all-MiniLM-L6-v2 cosine, clamped to [0, 1], answer = <advice>)"
    )
    scores = bi_encoder(
        None, ["<advice></advice>", "<advice>text</advice>", "<advice>text</advice>"], ["ref", None, "  "]
    )
    assert scores == [0.0, None, None]
    with pytest.raises(ValueError, match="references has 1 entries but completions has 2"):
        bi_encoder(None, ["a", "b"], ["ref"])


def test_extract_whole_scores_the_whole_completion(bi_encoder: Reranker) -> None:
    whole = make_reward("reranker", backend="bi-encoder", extract="whole")
    assert whole.label == "bi-encoder stand-in (all-MiniLM-L6-v2 cosine, clamped to [0, 1], whole completion)"
    reference = "Eczema; use moisturiser."
    completion = (
        "<think>The football match ended two to one.</think><advice>Eczema; use moisturiser.</advice>"
    )
    # advice: the document is the reference itself (cosine 1); whole: the off-topic reasoning and
    # the tags are part of the document, so it is further from the query
    assert bi_encoder(None, [completion], [reference]) == [pytest.approx(1.0, abs=1e-5)]
    whole_score = whole(None, [completion], [reference])[0]
    direct = bi_encoder._bi_encoder_scores([reference], [completion])[0]
    assert whole_score == pytest.approx(direct, abs=1e-6) and whole_score < 0.95
    with pytest.raises(ValueError, match="unknown extract mode"):
        Reranker(backend="bi-encoder", extract="<advice>")


def test_model_is_loaded_once_per_process(bi_encoder: Reranker) -> None:
    assert make_reward("reranker", backend="bi-encoder")._model is bi_encoder._model


def test_auto_falls_back_to_the_stand_in_with_a_warning(
    bi_encoder: Reranker, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="eapo.rewards.reranker"):
        reranker = make_reward(
            "reranker", backend="auto", model="eapo-test/not-a-cached-model", allow_download=False
        )
    assert reranker.backend == "bi-encoder" and "stand-in" in reranker.label
    assert (
        "falling back to the bi-encoder stand-in" in caplog.text
        and "eapo-test/not-a-cached-model" in caplog.text
    )
    pair = PAIRS[0]
    assert reranker(None, [pair[1]], [pair[0]]) == bi_encoder(None, [pair[1]], [pair[0]])


def test_cross_encoder_backend_fails_clearly_when_unavailable() -> None:
    with pytest.raises(
        RuntimeError,
        match="(?s)could not load the cross-encoder 'eapo-test/not-a-cached-model'.*backend='bi-encoder'",
    ):
        Reranker(backend="cross-encoder", model="eapo-test/not-a-cached-model", allow_download=False)
    with pytest.raises(ValueError, match="unknown backend"):
        Reranker(backend="colbert")


def test_cross_encoder_path_runs_on_a_local_model_directory(bi_encoder: Reranker) -> None:
    # MiniLM's encoder with a freshly initialised 1-logit head: meaningless scores, but the real
    # CrossEncoder code path (local loading, batched pairs, sigmoid, label) runs end to end.
    from eapo.rewards.reranker import bi_encoder_path

    reranker = Reranker(backend="cross-encoder", model=str(bi_encoder_path()), batch_size=2)
    assert reranker.backend == "cross-encoder" and reranker.label.startswith("cross-encoder reranker (")
    scores = reranker(
        None, [related for _, related, _ in PAIRS] + ["<advice></advice>"], [r for r, _, _ in PAIRS] + ["x"]
    )
    assert all(0.0 < score < 1.0 for score in scores[:-1]) and scores[-1] == 0.0
