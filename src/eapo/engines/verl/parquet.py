"""Records → verl's RL parquet format (what ``verl.utils.dataset.RLHFDataset`` reads).

One row per question, with verl's columns (the layout of verl's own ``examples/data_preprocess``)::

    data_source   str        "eapo/<loader>" unless given; passed to the reward function
    prompt        list[dict] chat messages [{"role": "user", "content": <filled template>}]
                             (``data.prompt_key``, default "prompt"; verl applies the chat template)
    ability       str        "medical_qa"
    reward_model  dict       {"style": "model", "ground_truth": <reference answer>}
    extra_info    dict       {"split", "index", "id", "question"}: ``index`` is verl's per-row
                             index; ``question`` is the bare question the LLM judge scores against

The prompt is built by :func:`eapo.data.build_messages`, the same messages the TRL trainer and
``eapo eval`` render. This module does not import verl (the export runs without it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["VERL_COLUMNS", "verl_rows", "write_verl_parquet"]

#: The columns written, in order.
VERL_COLUMNS: tuple[str, ...] = ("data_source", "prompt", "ability", "reward_model", "extra_info")


def verl_rows(
    records: Sequence[Any],
    *,
    prompt: str,
    data_source: str,
    split: str,
    ability: str = "medical_qa",
    questions: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """verl rows for ``records`` (:class:`eapo.data.Record`), prompts filled from template ``prompt``
    with ``questions`` (each record's question cut to fit, :attr:`eapo.data.PromptList.questions`;
    default: the records' whole questions). ``extra_info.question`` is the whole question."""
    from eapo.data import build_messages

    if questions is not None and len(questions) != len(records):
        raise ValueError(f"{len(questions)} questions for {len(records)} records")
    rows = []
    for index, record in enumerate(records):
        question = record.question if questions is None else questions[index]
        rows.append(
            {
                "data_source": data_source,
                "prompt": build_messages(question, prompt),
                "ability": ability,
                "reward_model": {"style": "model", "ground_truth": record.reference},
                "extra_info": {"split": split, "index": index, "id": record.id, "question": record.question},
            }
        )
    return rows


def write_verl_parquet(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ``rows`` (from :func:`verl_rows`) to the parquet file ``path``; parent folders are created."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"no rows to write to {path}; the split is empty")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{column: row[column] for column in VERL_COLUMNS} for row in rows])
    pq.write_table(table, path)
    return path
