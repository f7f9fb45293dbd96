"""Every relative link of the README and of docs/ resolves: the file or folder exists, and an anchor
(``page.md#heading``, ``#heading``) names a heading of that page as GitHub spells it."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from doc_pages import ROOT, anchors, doc_pages, github_slug, links


def broken_links(page) -> list[str]:
    broken = []
    for target in links(page):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:  # a web address: not ours to check offline
            continue
        path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if not path.exists():
            broken.append(f"{target} (no such file: {shown})")
        elif parts.fragment and path.suffix == ".md" and parts.fragment not in anchors(path):
            broken.append(f"{target} (no heading '{parts.fragment}' in {shown})")
    return broken


def test_every_link_of_the_readme_and_docs_resolves():
    broken = {page.relative_to(ROOT).as_posix(): found for page in doc_pages() if (found := broken_links(page))}
    assert not broken, broken


def test_a_broken_file_link_and_a_broken_anchor_are_reported(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading: with punctuation\n\ntext\n")
    page.write_text("# Page\n\n[ok](other.md#a-code-heading-with-punctuation) [self](#page) "
                    "[web](https://example.org/x) [gone](missing.md) [bad anchor](other.md#nope)\n")
    found = broken_links(page)
    assert len(found) == 2 and found[0].startswith("missing.md") and found[1].startswith("other.md#nope"), found


def test_headings_get_githubs_anchors(tmp_path):
    assert github_slug("Other benchmarks (MIEScore Table 6, SpatialReward Table 1)") == \
        "other-benchmarks-miescore-table-6-spatialreward-table-1"
    page = tmp_path / "p.md"
    page.write_text("# Notes\n\n## Notes\n\n## `score-batch` and `score`\n")
    assert anchors(page) == {"notes", "notes-1", "score-batch-and-score"}
