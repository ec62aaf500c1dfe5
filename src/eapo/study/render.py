"""``claims.md`` and ``claims.json`` of an :class:`~eapo.study.claims.Assessment`, laid out by its claims file.

``claims.md`` is the file's ``title``, the study's context lines (what ran, where, how long; from
:func:`eapo.study.run.run_study`), then the file's ``markdown:`` blocks in order, one blank line apart.
A block is one entry of :data:`BLOCKS`:

* ``{text: ...}``: a paragraph (a string, or a list of lines), ``{param}`` filled from the parameters;
* ``{verdicts: GROUP, columns: {header: cell}}``: a table of the group's claims, a cell a template over
  the claim's ``statement``, ``verdict``, ``evidence``, ``quote``, ``section``, ``rule``, ``key`` (or
  ``{paper: ..., beyond: ...}``: one template per ``basis``); ``|`` in a cell is escaped;
* ``{rules: GROUP}``: ``- **statement**: rule`` for each distinct rule of the group;
* ``{table: NAME, heading: ..., intro: ..., columns: [[header, column, format], ...]}``: a table of
  the claims file's tables (``label``: the row's configuration by name; ``format``: digits of an
  interval, a format spec of a number, ``count`` for a list's length); left out with its heading when
  it has no rows.

``claims.json`` holds the groups (each claim's :meth:`~eapo.study.claims.Claim.record`) and tables
under the keys of the file's ``json:`` layout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from eapo.study.claims import Assessment, ClaimsFile
from eapo.study.stats import Interval
from eapo.study.templates import TemplateFormatter

__all__ = ["BLOCKS", "Block", "register_block", "claims_markdown", "claims_payload", "jsonable"]

Paragraphs = list[list[str]]


@dataclass(frozen=True)
class Block:
    """A registered claims.md block: ``render(block, claims, assessment) -> paragraphs`` and ``check(block,
    claims) -> problem or None`` (run when the claims file is loaded)."""

    name: str
    render: Callable[[Mapping[str, Any], ClaimsFile, Assessment], Paragraphs]
    check: Callable[[Mapping[str, Any], ClaimsFile], str | None]
    keys: tuple[str, ...]
    help: str = ""


#: name -> block. A ``markdown:`` entry of a claims file holds one of these names as a key.
BLOCKS: dict[str, Block] = {}


def register_block(
    name: str, *, keys: Sequence[str] = (), check: Callable[[Mapping[str, Any], ClaimsFile], str | None]
) -> Callable[[Callable[..., Paragraphs]], Callable[..., Paragraphs]]:
    def register(render: Callable[..., Paragraphs]) -> Callable[..., Paragraphs]:
        BLOCKS[name] = Block(name, render, check, (name, *keys), " ".join((render.__doc__ or "").split()))
        return render

    return register


def _lines(text: str | Sequence[str]) -> list[str]:
    return [text] if isinstance(text, str) else list(text)


def _escape(text: str) -> str:
    """Text for a Markdown table cell (a ``|`` would end the cell)."""
    return text.replace("|", "\\|")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(cells) + " |" for cells in rows),
    ]


# --------------------------------------------------------------------------------------------
# The blocks
# --------------------------------------------------------------------------------------------


def _check_text(block: Mapping[str, Any], claims: ClaimsFile) -> str | None:
    text = block["text"]
    if isinstance(text, str) or (isinstance(text, list) and all(isinstance(t, str) for t in text)):
        return None
    return "text must be a string or a list of lines"


@register_block("text", check=_check_text)
def _text(block: Mapping[str, Any], claims: ClaimsFile, assessment: Assessment) -> Paragraphs:
    """A paragraph (a string, or a list of lines), {param}s filled."""
    formatter = TemplateFormatter(claims.names)
    return [[formatter.vformat(line, (), assessment.params) for line in _lines(block["text"])]]


_CLAIM_FIELDS = ("key", "statement", "verdict", "evidence", "quote", "section", "rule", "basis")


def _check_verdicts(block: Mapping[str, Any], claims: ClaimsFile) -> str | None:
    if block["verdicts"] not in claims.groups:
        return f"verdicts: no group {block['verdicts']!r}; groups: {', '.join(claims.groups)}"
    columns = block.get("columns")
    if not isinstance(columns, Mapping) or not columns:
        return "columns must map each header to a template over " + ", ".join(_CLAIM_FIELDS)
    for header, cell in columns.items():
        templates = cell.values() if isinstance(cell, Mapping) else [cell]
        if isinstance(cell, Mapping) and set(cell) != {"paper", "beyond"}:
            return f"columns.{header}: a per-basis cell needs exactly the keys paper and beyond"
        for template in templates:
            if not isinstance(template, str):
                return f"columns.{header} must be a template string"
            try:
                template.format(**dict.fromkeys(_CLAIM_FIELDS, ""))
            except (KeyError, IndexError, ValueError) as error:
                return f"columns.{header}: {error!r} is not a field of a claim ({', '.join(_CLAIM_FIELDS)})"
    return None


@register_block("verdicts", keys=("columns",), check=_check_verdicts)
def _verdicts(block: Mapping[str, Any], claims: ClaimsFile, assessment: Assessment) -> Paragraphs:
    """A table of a group's claims: columns maps each header to a template over the claim's fields (or to
    {paper: ..., beyond: ...})."""
    rows = []
    for claim in assessment.claims[block["verdicts"]]:
        fields = {name: getattr(claim, name) for name in _CLAIM_FIELDS}
        cells = []
        for cell in block["columns"].values():
            template = cell[claim.basis] if isinstance(cell, Mapping) else cell
            cells.append(_escape(template.format(**fields)))
        rows.append(cells)
    return [_table(list(block["columns"]), rows)]


def _check_rules(block: Mapping[str, Any], claims: ClaimsFile) -> str | None:
    if block["rules"] not in claims.groups:
        return f"rules: no group {block['rules']!r}; groups: {', '.join(claims.groups)}"
    if any(not claim.rule for claim in claims.groups[block["rules"]]):
        return f"rules: group {block['rules']!r} has a claim without a rule"
    return None


@register_block("rules", check=_check_rules)
def _rules(block: Mapping[str, Any], claims: ClaimsFile, assessment: Assessment) -> Paragraphs:
    """ "- **statement**: rule" for each distinct rule of a group's claims."""
    seen: set[str] = set()
    lines = []
    for claim in assessment.claims[block["rules"]]:
        if claim.rule not in seen:
            seen.add(claim.rule)
            lines.append(f"- **{claim.statement}**: {claim.rule}")
    return [lines]


def _check_table(block: Mapping[str, Any], claims: ClaimsFile) -> str | None:
    name = block["table"]
    if name not in claims.tables:
        return f"table: no table {name!r}; tables: {', '.join(claims.tables) or 'none'}"
    columns = block.get("columns")
    if not isinstance(columns, list) or not columns:
        return "columns must be a list of [header, column] or [header, column, format]"
    known = {"label", *claims.tables[name].columns}
    for index, column in enumerate(columns):
        if not isinstance(column, list) or len(column) not in (2, 3):
            return f"columns[{index}] must be [header, column] or [header, column, format], got {column!r}"
        if column[1] not in known:
            return f"columns[{index}]: {column[1]!r} is not a column of table {name} ({', '.join(sorted(known))})"
    return None


def cell(value: Any, fmt: Any = None) -> str:
    """A table cell: not measured ``–``, an interval ``mean [low, high]`` (``fmt``: digits), a list's
    numbers joined (``count``: its length), a number by ``fmt`` (default ``.3f``)."""
    if value is None:
        return "–"
    if isinstance(value, Interval):
        return value.text(3 if fmt is None else int(fmt))
    if isinstance(value, list | tuple):
        if fmt == "count":
            return str(len(value))
        return ", ".join(format(v, fmt or ".3f") for v in value) or "–"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if fmt is None else format(value, fmt)
    if isinstance(value, float):
        return format(value, fmt or ".3f")
    return str(value)


@register_block("table", keys=("heading", "intro", "columns"), check=_check_table)
def _table_block(block: Mapping[str, Any], claims: ClaimsFile, assessment: Assessment) -> Paragraphs:
    """A table of the claims file's tables, under its heading and intro; left out when it has no rows."""
    name = block["table"]
    rows = assessment.tables[name]
    if not rows:
        return []
    pairs = (
        list(rows.items())
        if isinstance(rows, Mapping)
        else list(zip(assessment.row_roles[name], rows, strict=True))
    )
    columns = block["columns"]
    body = []
    for role, row in pairs:
        body.append(
            [
                claims.names.get(role, role) if column[1] == "label" else cell(row[column[1]], *column[2:])
                for column in columns
            ]
        )
    formatter = TemplateFormatter(claims.names)
    paragraphs: Paragraphs = []
    for key in ("heading", "intro"):
        if block.get(key):
            paragraphs.append([formatter.vformat(line, (), assessment.params) for line in _lines(block[key])])
    return [*paragraphs, _table([column[0] for column in columns], body)]


# --------------------------------------------------------------------------------------------
# The files
# --------------------------------------------------------------------------------------------


def claims_markdown(claims: ClaimsFile, assessment: Assessment, context: Sequence[str] = ()) -> str:
    """``claims.md``: the title, the ``context`` lines, then each ``markdown:`` block, one blank line apart."""
    paragraphs: Paragraphs = [[f"# {claims.title}"]]
    if context:
        paragraphs.append(list(context))
    for block in claims.markdown:
        kind = next(key for key in block if key in BLOCKS)
        paragraphs += BLOCKS[kind].render(block, claims, assessment)
    return "\n\n".join("\n".join(lines) for lines in paragraphs) + "\n"


def jsonable(value: Any) -> Any:
    """Intervals as ``{mean, low, high, n}``, the rest as is (for ``json.dumps``)."""
    if isinstance(value, Interval):
        return asdict(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def claims_payload(claims: ClaimsFile, assessment: Assessment) -> dict[str, Any]:
    """The groups and tables of ``assessment`` under the keys of the claims file's ``json:`` layout."""

    def build(layout: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, name in layout.items():
            if isinstance(name, Mapping):
                out[key] = build(name)
            elif name in assessment.claims:
                out[key] = [jsonable(claim.record()) for claim in assessment.claims[name]]
            else:
                out[key] = jsonable(assessment.tables[name])
        return out

    return build(claims.layout)
