"""One Markdown (GitHub pipe) table builder for every report, card and benchmark outside the Hub files: a cell can
never break the table (``|`` escaped, newlines flattened), a ragged row is an error, never a shifted column. (The
Hub files cannot import this module; ``model_card.py`` keeps its own few lines.)
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence, Union

ALIGN_MARKS = {None: "---", "left": ":---", "right": "---:", "center": ":---:"}
_LETTERS = {"l": "left", "r": "right", "c": "center", "-": None}


def markdown_cell(value: Any) -> str:
    """``value`` as one table cell: ``str``, ``|`` escaped, newlines flattened to spaces."""
    return " ".join(str(value).replace("|", "\\|").splitlines())


def _alignments(align: Union[str, Sequence[Optional[str]], None], n: int) -> list:
    """Per-column alignment names (``None`` = unspecified) from ``None``, a sequence of names or one letter each."""
    if isinstance(align, str):
        unknown = sorted(set(align) - set(_LETTERS))
        if unknown:
            raise ValueError(f"markdown_table: align letters must be l, r, c or -, got {unknown} in {align!r}")
        align = [_LETTERS[a] for a in align]
    align = [None] * n if align is None else list(align)
    unknown = [a for a in align if a not in ALIGN_MARKS]
    if unknown:
        raise ValueError(f"markdown_table: align must be 'left', 'right', 'center' or None, got {unknown}")
    if len(align) != n:
        raise ValueError(f"markdown_table: {len(align)} alignments for {n} columns")
    return align


def markdown_table(header: Sequence[Any], rows: Iterable[Sequence[Any]],
                   align: Union[str, Sequence[Optional[str]], None] = None, pad: bool = False) -> str:
    """A pipe table: a header line, an alignment line (``| --- | ---: |``) and one line per row, no trailing
    newline. ``align``: per column ``"left"``/``"right"``/``"center"``/``None``, or one letter each (``"lrr"``).
    ``pad``: every column as wide as its widest cell. Raises ``ValueError`` for a row with the wrong number of
    cells (its index and both lengths) or an unknown alignment."""
    head = [markdown_cell(h) for h in header]
    if not head:
        raise ValueError("markdown_table: the header has no columns")
    body = []
    for index, row in enumerate(rows):
        cells = [markdown_cell(c) for c in row]
        if len(cells) != len(head):
            raise ValueError(f"markdown_table: row {index} has {len(cells)} cells, the header {len(head)} "
                             f"({head}); give every row one cell per column (an empty string for a blank)")
        body.append(cells)
    marks = [ALIGN_MARKS[a] for a in _alignments(align, len(head))]
    if pad:  # every mark holds "---" once: widen it to the column
        widths = [max(3, *(len(r[i]) for r in [head, *body])) for i in range(len(head))]
        marks = [m.replace("---", "-" * (w - len(m) + 3)) for m, w in zip(marks, widths)]
        head, *body = ([c.ljust(w) for c, w in zip(r, widths)] for r in [head, *body])
    return "\n".join("| " + " | ".join(line) + " |" for line in [head, marks, *body])


__all__ = ["ALIGN_MARKS", "markdown_cell", "markdown_table"]
