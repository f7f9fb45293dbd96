"""Issue 13 item 3: a few kilobytes of input must not cost gigabytes of memory.

Seventeen 6200x6200 1-bit PNGs (16 sources + the edited image, ~5 kB each, 38 Mpx each once decoded) are scored
in a fresh process whose peak resident memory (``VmHWM``) is read from ``/proc``: with the default per-sample
budget they are refused from their headers; with the budget raised they are scored, each image reduced while
decoding, and the peak stays far below what decoding them at full size costs (17 x 38 Mpx x 3 bytes = 2 GB).
Reduced decoding scores like full decoding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from PIL import Image

from modeling_miescore.hub.processing_miescore import DEFAULT_MAX_SAMPLE_PIXELS, EditSample

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM from /proc")

_SCRIPT = textwrap.dedent("""
    import json, sys

    def peak_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024

    from modeling_miescore.hub.errors import MIEScoreInputError
    from modeling_miescore.scoring.loading import load_scorer

    model = load_scorer(sys.argv[1], device="cpu", dtype="float32")
    model.config.max_pixels = 131_072  # a small per-image budget keeps the tiny model's sequence short
    paths = json.loads(sys.argv[2])
    kwargs = json.loads(sys.argv[3])
    before = peak_mb()
    try:
        scores = model.score_batch([{"sources": paths[:-1], "edited": paths[-1], "instruction": "x"}], **kwargs)
        outcome = "scored"
    except MIEScoreInputError as err:
        outcome = "refused: " + str(err)
    print(json.dumps({"outcome": outcome, "before_mb": before, "peak_mb": peak_mb()}))
""")


@pytest.fixture(scope="module")
def bitmaps(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bitmaps")
    original = folder / "bits.png"
    Image.new("1", (6200, 6200)).save(original)
    assert original.stat().st_size < 20_000
    paths = []
    for k in range(17):  # distinct paths: each is decoded on its own, as 17 different files would be
        paths.append(folder / f"image{k}.png")
        os.symlink(original, paths[-1])
    return [str(p) for p in paths]


def _score_in_subprocess(checkpoint, paths, **kwargs) -> dict:
    result = subprocess.run([sys.executable, "-c", _SCRIPT, str(checkpoint), json.dumps(paths), json.dumps(kwargs)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_seventeen_huge_bitmaps_are_refused_from_their_headers(tiny_miescore_path, bitmaps):
    assert 17 * 6200 * 6200 > DEFAULT_MAX_SAMPLE_PIXELS
    run = _score_in_subprocess(tiny_miescore_path, bitmaps)
    assert run["outcome"].startswith("refused: sample 0: its 17 images decode to 653 Mpx together, above the "
                                     "per-sample budget of 256 Mpx"), run
    assert run["peak_mb"] - run["before_mb"] < 50, run  # nothing was decoded


@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_with_the_budget_raised_they_are_scored_in_bounded_memory(tiny_miescore_path, bitmaps):
    run = _score_in_subprocess(tiny_miescore_path, bitmaps, max_sample_pixels=10**9)
    assert run["outcome"] == "scored", run
    # One image at a time is decoded at full size (38 MB as 8-bit grey) and reduced 17x right away.
    assert run["peak_mb"] - run["before_mb"] < 300, run  # measured ~160 MB, as for 17 small images


def _big_copies(folder, example, scale, suffix):
    paths = []
    for k, image in enumerate([*example["sources"], example["edited"]]):
        paths.append(folder / f"big{k}.{suffix}")
        image.resize((image.width * scale, image.height * scale), Image.BICUBIC).save(paths[-1])
    return paths


@pytest.mark.parametrize("suffix, scale", [("jpg", 10), ("png", 8)])
def test_reduced_decoding_scores_like_full_decoding(tiny_miescore, examples, tmp_path, suffix, scale, monkeypatch):
    # a per-image budget of 128 Kpx makes the copies (1.1-1.7 Mpx) at least 4x the budget, so they are reduced
    monkeypatch.setattr(tiny_miescore.config, "max_pixels", 131_072)
    paths = _big_copies(tmp_path, examples[0], scale, suffix)
    sample = EditSample(sources=paths[:-1], edited=paths[-1], instruction=examples[0]["instruction"])
    budget = tiny_miescore.config.max_pixels
    full = sample.load(target_pixels=None)
    reduced = sample.load(target_pixels=budget)
    assert all(r.width * r.height < f.width * f.height / 3 for r, f in zip(reduced.sources, full.sources))
    assert all(r.width * r.height >= budget for r in [*reduced.sources, reduced.edited])
    processor = tiny_miescore.get_processor()
    a, b = (tiny_miescore._run_call(tiny_miescore._prepare_call([s], None, processor), 1)[0] for s in (full, reduced))
    assert max(abs(a[name] - b[name]) for name in a) < 0.5, (a, b)  # 0-100 scale; measured: < 0.05
