"""The documentation as the tests read it: the README and the pages under ``docs/``, their fenced blocks (with the
marker line before each) and their links, parsed with markdown-it-py (which ``rich`` brings in through
``transformers``).

``doc_pages()`` lists the Markdown files; ``fenced_blocks(path)`` the fenced code blocks of one, each with its info
string, its text and the HTML comment right before it (``<!-- doc-test: NAME -->`` ...; see
``tests/test_doc_blocks.py``); ``links(path)`` the link targets; ``anchors(path)`` the anchors GitHub makes for
its headings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["ROOT", "DocBlock", "anchors", "doc_pages", "fenced_blocks", "github_slug", "links"]

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!--\s*(doc-test|doc-skip):\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class DocBlock:
    page: str  # path relative to the repository root
    line: int  # 1-based line of the opening fence
    info: str  # the fence's language (``bash``, ``python``, ...)
    text: str
    marker: tuple[str, str] | None  # ("doc-test", NAME) or ("doc-skip", REASON), from the line before the fence

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def doc_pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@lru_cache(maxsize=None)
def _tokens(path: Path):
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").parse(path.read_text(encoding="utf-8"))


def fenced_blocks(path: Path) -> list[DocBlock]:
    """The fenced code blocks of ``path`` with the marker comment on the non-blank line right before each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    for token in _tokens(path):
        if token.type != "fence":
            continue
        start = token.map[0]
        before = next((lines[i].strip() for i in range(start - 1, -1, -1) if lines[i].strip()), "")
        match = MARKER.match(before)
        blocks.append(DocBlock(path.relative_to(ROOT).as_posix(), start + 1, token.info.strip().split(" ")[0],
                               token.content, (match.group(1), match.group(2)) if match else None))
    return blocks


def links(path: Path) -> list[str]:
    """Every link and image target of ``path``, in order."""
    found = []
    for token in _tokens(path):
        for child in token.children or ():
            if child.type == "link_open":
                found.append(child.attrs["href"])
            elif child.type == "image":
                found.append(child.attrs["src"])
    return found


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings (a repeated heading gets ``-1``, ``-2``, ... as on GitHub) and of its
    explicit ``<a id=...>`` / ``<a name=...>`` tags."""
    tokens = _tokens(path)
    seen: dict[str, int] = {}
    found = set()
    for opening, inline in zip(tokens, tokens[1:]):
        if opening.type != "heading_open":
            continue
        text = "".join(child.content for child in inline.children if child.type in ("text", "code_inline"))
        slug = github_slug(text)
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", path.read_text(encoding="utf-8")))
    return found
