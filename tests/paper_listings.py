"""Diff the package's prompts against the paper's listings (text fixtures cut from the paper, one listing a
line: ``Title ⬇ body``), word by word, the paper's rendering undone (HTML entities, typographic quotes)."""

from __future__ import annotations

import difflib
import html
from pathlib import Path


def paper_words(text: str) -> list[str]:
    """The paper's rendering undone (HTML entities, typographic quotes), whitespace collapsed."""
    text = html.unescape(text).translate(str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"'}))
    return text.split()


def assert_listings_match(fixture: Path, ours: dict[str, str]) -> None:
    """Every listing of ``fixture`` is one of ``ours`` (by title) and says the same words."""
    listings = {}
    for line in fixture.read_text(encoding="utf-8").splitlines():
        if "⬇" in line:
            title, body = line.split("⬇", 1)
            listings[html.unescape(title).strip()] = body
    assert set(listings) == set(ours)
    for title, text in ours.items():
        diff = list(difflib.unified_diff(paper_words(listings[title]), paper_words(text), "paper", "ours",
                                         lineterm="", n=3))
        assert not diff, f"{title} differs from the paper:\n" + "\n".join(diff)
