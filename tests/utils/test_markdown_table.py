"""The one Markdown table builder (``modeling_miescore.utils.markdown_table``): escaping, the alignment row,
padding, and a clear error for a row that does not fit the header."""

from __future__ import annotations

import pytest

from modeling_miescore.utils.markdown_table import markdown_table


def _cells(line: str) -> list[str]:
    """A table line's cells, split on unescaped pipes (as a GitHub-flavoured Markdown renderer does)."""
    import re

    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_a_pipe_or_newline_in_a_cell_cannot_break_the_table():
    text = markdown_table(["name", "a | b"], [["x|y", "first\nsecond"], [3, None]])
    lines = text.splitlines()
    assert len(lines) == 4 and not text.endswith("\n")
    assert lines[0] == "| name | a \\| b |"
    assert lines[2] == "| x\\|y | first second |"
    assert lines[3] == "| 3 | None |"  # cells converted with str
    assert all(len(_cells(line)) == 2 for line in lines)


@pytest.mark.parametrize("align, marks", [
    (None, ["---", "---", "---"]),
    ("lrc", [":---", "---:", ":---:"]),
    ("-r-", ["---", "---:", "---"]),
    (["left", None, "center"], [":---", "---", ":---:"]),
])
def test_alignment_row(align, marks):
    assert _cells(markdown_table(["a", "b", "c"], [[1, 2, 3]], align=align).splitlines()[1]) == marks


def test_padded_columns_line_up_and_keep_their_alignment():
    lines = markdown_table(["entry", "n"], [["score", 12], ["x", 3]], align="lr", pad=True).splitlines()
    assert lines == ["| entry | n   |", "| :---- | --: |", "| score | 12  |", "| x     | 3   |"]
    assert len({len(line) for line in lines}) == 1


def test_a_ragged_row_is_a_clear_error():
    with pytest.raises(ValueError, match=r"row 1 has 3 cells, the header 2"):
        markdown_table(["a", "b"], [[1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        markdown_table(["a", "b"], [[1]])


def test_bad_alignments_are_clear_errors():
    with pytest.raises(ValueError, match="2 alignments for 3 columns"):
        markdown_table(["a", "b", "c"], [], align="lr")
    with pytest.raises(ValueError, match="align letters"):
        markdown_table(["a"], [], align="x")
    with pytest.raises(ValueError, match="'left', 'right', 'center' or None"):
        markdown_table(["a"], [], align=["middle"])
    with pytest.raises(ValueError, match="no columns"):
        markdown_table([], [])
