"""``report.html``: a benchmark report's Markdown as one self-contained HTML page (plots embedded), to open in any
browser or attach to a message; no scripts, no network, no files beside it.

The Markdown (:func:`.report.render_markdown`) is rendered by ``markdown-it-py`` (CommonMark plus GitHub tables,
the dialect ``report.md`` is written in). Each image must be a PNG written by the report inside its folder (the
``plots`` paths); it is embedded as a ``data:image/png;base64`` URI. Raw HTML in the Markdown is escaped, except
the ``<details>`` / ``<summary>`` wrappers the reports use to fold long tables, so a model name or id taken from
a predictions file can never inject markup.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from urllib.parse import unquote

__all__ = ["render_html"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_FOLD = re.compile(r"\s*(<details>(<summary>[^<>]*</summary>)?|</details>)\s*")

_STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328; margin: 0; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 32px 64px; }
h1 { border-bottom: 1px solid #d0d7de; padding-bottom: .3em; }
h2 { margin-top: 2em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; }
table { border-collapse: collapse; margin: 1em 0; display: block; overflow-x: auto;
        font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: 4px 10px; }
th { background: #f6f8fa; }
tr:nth-child(2n) td { background: #fbfcfd; }
img { max-width: 100%; height: auto; display: block; margin: 1em 0; }
code { background: #f6f8fa; padding: .1em .3em; border-radius: 4px; font-size: 90%; }
details { margin: 1em 0; }
summary { cursor: pointer; font-weight: 600; }
"""


def _data_uri(base_dir: Path, src: str) -> str:
    """A report image as a PNG data URI; the file must be a PNG inside ``base_dir`` (the report folder)."""
    base = base_dir.resolve()
    path = (base / unquote(src)).resolve()
    if base not in path.parents:
        raise ValueError(f"report image '{src}' is outside the report folder '{base_dir}'")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"report image '{src}' cannot be read ({err.strerror}); draw the plots first") from None
    if not data.startswith(_PNG_SIGNATURE):
        raise ValueError(f"report image '{src}' is not a PNG file")
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _parser(base_dir: Path):
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    image = md.renderer.rules["image"]

    def embedded_image(self, tokens, idx, options, env):
        token = tokens[idx]
        token.attrSet("src", _data_uri(base_dir, str(token.attrGet("src") or "")))
        return image(tokens, idx, options, env)

    def fold_or_escape(self, tokens, idx, options, env):
        content = tokens[idx].content
        return content if _FOLD.fullmatch(content) else html.escape(content)

    md.add_render_rule("image", embedded_image)
    md.add_render_rule("html_block", fold_or_escape)
    md.add_render_rule("html_inline", fold_or_escape)
    return md


def render_html(markdown: str, base_dir) -> str:
    """The HTML page of a report's Markdown; images are read from ``base_dir`` (the report folder) and embedded.

    Raises ValueError when an image is missing, outside ``base_dir`` or not a PNG (nothing is written then).
    """
    body = _parser(Path(base_dir)).render(markdown)
    title = next((line[2:].strip() for line in markdown.splitlines() if line.startswith("# ")), "Benchmark report")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            # an empty icon: the browser asks for no favicon.ico (a file:// page would log that as an error)
            "<link rel=\"icon\" href=\"data:,\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n"
            f"<body>\n<main>\n{body}</main>\n</body>\n</html>\n")
