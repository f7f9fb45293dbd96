"""Checks of an exported MIEScore (``merged/`` + ``adapter/``) as a reader of its model cards meets it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from card_blocks import run_python_blocks
from modeling_miescore.hub.model_card import ADAPTER_SUFFIX, BASE_PLACEHOLDER, REPO_PLACEHOLDER
from modeling_miescore.training.miescore_model import load_base_model

__all__ = ["check_export_cards"]


def check_export_cards(merged: Path, adapter: Path, base: Path, records: list, expected: list, work: Path,
                        base_is_scorer: bool = True):
    """Every python block of both exported cards runs (the merged card's placeholder -> its folder; the adapter
    card as written: it names this run's adapter folder and local base); the adapter card's recipe (base + the
    run's overrides + PeftModel) scores like the merged checkpoint (to 1e-4)."""
    work.mkdir()
    first = records[0]
    for name, src in zip(("source_1.png", "source_2.png", "edited.png"), [*first["sources"][:2], first["edited"]]):
        shutil.copy(src, work / name)  # the example inputs the cards' code names
    probe = ("\n```python\nimport json\nprint('PROBE', json.dumps([model.score(**r) for r in json.loads("
             f"{json.dumps(records)!r})]))\n```\n")
    adapter_card = (adapter / "README.md").read_text()
    replace = "  # a folder on the machine that trained: replace it by the Hub repo id before pushing"
    assert f"ADAPTER = {json.dumps(str(adapter.resolve()))}{replace}\n" in adapter_card
    assert f"BASE = {json.dumps(str(base.resolve()))}{replace}\n" in adapter_card
    assert "`ADAPTER` and `BASE` point at the folders of the run that wrote this card" in adapter_card
    assert REPO_PLACEHOLDER["miescore"] + ADAPTER_SUFFIX not in adapter_card and BASE_PLACEHOLDER not in adapter_card
    cards = {"merged": ((merged / "README.md").read_text() + probe, {REPO_PLACEHOLDER["miescore"]: str(merged)}),
             "adapter": (adapter_card + probe, {})}  # as written
    assert "image-edit-scoring" in cards["merged"][0] and "PeftModel" in cards["adapter"][0]
    proc = run_python_blocks(cards, work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    merged_scores, adapter_scores = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
                                     if line.startswith("PROBE ")]
    for got_merged, got_adapter, want in zip(merged_scores, adapter_scores, expected):
        for key in want:
            assert got_merged[key] == pytest.approx(want[key], abs=1e-5)
            assert got_adapter[key] == pytest.approx(got_merged[key], abs=1e-4)
    if not base_is_scorer:
        return
    # the overrides matter: base + adapter without them (the earlier recipe) scores otherwise
    from peft import PeftModel

    stale, _ = load_base_model(str(base))
    stale = PeftModel.from_pretrained(stale, str(adapter)).merge_and_unload().eval()
    assert max(abs(s[k] - e[k]) for s, e in zip([stale.score(**r) for r in records], expected) for k in e) > 1e-3
