"""Run the Python code blocks of a generated card (model or dataset card) the way a reader would.

``python_blocks(markdown)`` lists the fenced blocks whose info string is ``python`` (parsed with markdown-it-py,
which ``rich`` brings in through ``transformers``). ``run_python_blocks(...)`` executes them in order, in one
fresh interpreter (later blocks of a card may use names defined by earlier ones, as in a notebook), offline
(``HF_HUB_OFFLINE=1``) and with caches under a temporary folder; the card's placeholder repo id is replaced by
the local artifact first. Several cards can share the interpreter (imports are paid once); each starts with
fresh names. A failing block is named (card and number) in stderr, with its traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

__all__ = ["python_blocks", "run_python_blocks"]

_RUNNER = """
import json, sys, traceback
cards = json.loads(open(sys.argv[1], encoding="utf-8").read())
for card, blocks in cards.items():
    namespace = {"__name__": "__main__"}
    for number, code in enumerate(blocks, start=1):
        try:
            exec(compile(code, f"<{card}: block {number}>", "exec"), namespace)
        except BaseException:
            print(f"{card}: block {number} failed:\\n{code}", file=sys.stderr)
            traceback.print_exc()
            sys.exit(1)
print(sum(map(len, cards.values())), "block(s) ran")
"""


def python_blocks(markdown: str) -> list[str]:
    """The fenced ``python`` code blocks of ``markdown``, in order."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(markdown)
    return [t.content for t in tokens if t.type == "fence" and t.info.strip().split(" ")[0] == "python"]


def run_python_blocks(cards: str | Mapping[str, tuple[str, Mapping[str, str]]], work_dir: Path, *,
                      replacements: Mapping[str, str] = (), timeout: float = 300) -> subprocess.CompletedProcess:
    """Run every ``python`` block of a card (after ``replacements``) in one offline subprocess.

    ``cards`` is one card's Markdown, or ``{name: (markdown, replacements)}`` for several cards run one after the
    other in the same interpreter. ``work_dir`` is the working directory and holds the Hugging Face caches.
    Returns the finished process (``returncode`` 0 when every block ran; stderr names the failing block).
    """
    if isinstance(cards, str):
        cards = {"card": (cards, replacements)}
    blocks = {}
    for name, (markdown, swaps) in cards.items():
        for old, new in dict(swaps).items():
            markdown = markdown.replace(old, new)
        blocks[name] = python_blocks(markdown)
    work_dir.mkdir(parents=True, exist_ok=True)
    blocks_file = work_dir / "card_blocks.json"
    blocks_file.write_text(json.dumps(blocks), encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(work_dir / "hf_home"),
               HF_DATASETS_CACHE=str(work_dir / "hf_datasets_cache"))
    return subprocess.run([sys.executable, "-c", _RUNNER, str(blocks_file)], cwd=work_dir, env=env,
                          capture_output=True, text=True, timeout=timeout)
