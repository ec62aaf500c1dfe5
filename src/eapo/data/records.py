"""The record type every loader returns, and the errors loaders raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class DataError(ValueError):
    """Bad dataset input: the message says what was wrong, where (file, line, field) and what to do."""


class DataFileNotFoundError(DataError, FileNotFoundError):
    """A dataset file or directory does not exist (also a :class:`FileNotFoundError`)."""


@dataclass(frozen=True)
class Record:
    """One question with its reference answer.

    Attributes:
        id: unique within the loaded dataset (the file's id, or ``<file stem>-<line>`` when the
            rows carry none).
        question: the text that fills a prompt's ``{question}``.
        reference: the reference answer the rewards and the evaluation score against.
        metadata: every other field of the source row (e.g. RJUA's ``context``/``disease``/
            ``advice``, CMD's ``title``/``department``/``sub_department``). The dataclass is
            frozen; treat this dict as read-only too.
    """

    id: str
    question: str
    reference: str
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"id", "question", "reference", "metadata"}``."""
        return {
            "id": self.id,
            "question": self.question,
            "reference": self.reference,
            "metadata": dict(self.metadata),
        }


class RecordList(list[Record]):
    """The ``list[Record]`` that :func:`eapo.data.load` returns, plus where it came from.

    Attributes:
        name: the loader name.
        split: the split that was asked for (``"train"``, ``"dev"``, ``"test"``, ``"all"``, a
            fraction or a fraction range).
        files: the files (or Hugging Face splits) that were read.
        skipped: one ``"<file>:<line>: <reason>"`` per row dropped by ``skip_bad_rows=True``,
            counted over every file read (before the split and ``limit`` are applied).
    """

    def __init__(
        self,
        records: list[Record] | tuple[Record, ...] = (),
        *,
        name: str = "",
        split: Any = "all",
        files: list[str] | None = None,
        skipped: list[str] | None = None,
    ) -> None:
        super().__init__(records)
        self.name = name
        self.split = split
        self.files = list(files or [])
        self.skipped = list(skipped or [])

    @property
    def ids(self) -> list[str]:
        return [record.id for record in self]

    def __repr__(self) -> str:
        return (
            f"RecordList(name={self.name!r}, split={self.split!r}, rows={len(self)}, "
            f"skipped={len(self.skipped)}, files={self.files!r})"
        )
