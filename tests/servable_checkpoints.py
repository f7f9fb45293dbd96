"""Tiny SpatialReward checkpoints that a real vLLM serves (the ``engines`` tests, ``benchmarks/bench_vllm.py``).

vLLM's CPU attention kernels refuse the package's tiny head_dim of 16, so both models here use the ``"vllm"``
attention geometry (``tiny_models.ATTENTION_GEOMETRIES``: head_dim 64), and both are exported to the plain
Qwen3-VL layout vLLM reads (:func:`~modeling_miescore.scoring.vllm_export.export_for_vllm`). They are built once and
kept under ``default_cache_dir() / "engines"`` (a folder per builder version and settings, written to a temporary
sibling and renamed when complete):

* :func:`random_servable_spatialreward`: random (sharpened) weights with the real Qwen vocabulary
  (``qwen_vocab``: real token counts) and the paper's D.1 prompts; its texts are not judgements (every answer is
  flagged), which is what the judge, RL and limit tests need: a real engine parsing real-sized requests.
* :func:`overfit_spatialreward`: trained with the package's SFT recipe (``trainers/sft_spatialreward.py``, full
  fine-tuning) until it answers the :data:`PARITY_ROWS` edits with valid grounded judgements (boxes, grounding
  tokens, scores), checked after training. The parity test compares its judgements through vLLM with
  ``load_spatialreward(...).evaluate_edits`` in process. It uses the tiny 1,000-token vocabulary and short prompts:
  with the real vocabulary's 151,936-row output layer, the SFT steps cost about 15 CPU-seconds each (measured here)
  and memorising takes well over a hundred; the serving path under test (chat template, image order and size,
  stop tokens, token budget) is the same for any vocabulary and prompt wording.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List

from modeling_miescore.scoring.loading import load_spatialreward
from modeling_miescore.scoring.vllm_export import export_for_vllm
from modeling_miescore.testing import build_tiny_miescore, build_tiny_spatialreward
from modeling_miescore.testing.qwen_vocab import default_cache_dir
from modeling_miescore.testing.spatialreward_fixture import make_spatialreward_sft_rows

__all__ = ["BUILD_VERSION", "MIESCORE_SETTINGS", "OVERFIT_SETTINGS", "PARITY_ROWS", "RANDOM_SETTINGS",
           "overfit_spatialreward", "parity_edits", "parity_rows", "random_servable_miescore",
           "random_servable_spatialreward"]

BUILD_VERSION = 2  # bump when a builder below changes what it writes
# rows of make_spatialreward_sft_rows(15, seed=0, num_bad=0) learnt by the overfit model: the SC rows of
# cat-coffee (2 sources), cat-astronaut-coffee (3 sources), cat-coffee-failed (2 sources, no region) and cat-coffee
# (1 source), and the PQ rows of those three edited images
PARITY_ROWS = (10, 7, 13, 0, 5, 2, 8)
# short prompts (the D.1 ones hold ~900 tokens of the tiny vocabulary): keeps the test-time SFT to minutes
_SHORT_PROMPTS = {
    "sc_prompt": "Judge how the second image edits the first one. Editing instruction: {instruction}",
    "sc_prompt_multi": "Judge how the last image combines the {num_input_images} input images. "
                       "Editing instruction: {instruction}",
    "pq_prompt": "Judge the naturalness and the artifacts of the image.",
}
OVERFIT_SETTINGS = {"max_new_tokens": 160, "min_pixels": 16_384, "max_pixels": 16_384, **_SHORT_PROMPTS}
RANDOM_SETTINGS = {"max_new_tokens": 32, "min_pixels": 16_384, "max_pixels": 65_536}
MIESCORE_SETTINGS = {"min_pixels": 16_384, "max_pixels": 65_536}
_SFT_STEPS = 120
_SFT_ARGS = ("--use_peft", "false", "--add_grounding_tokens", "false", "--learning_rate", "1e-2",
             "--per_device_train_batch_size", str(len(PARITY_ROWS)), "--max_steps", str(_SFT_STEPS),
             "--logging_steps", "25", "--min_pixels", "16384", "--max_pixels", "16384")


def parity_rows() -> List[dict]:
    """The SFT rows of :data:`PARITY_ROWS` (synthetic fixture rows; ``expected_drop`` as a string column)."""
    rows = make_spatialreward_sft_rows(15, seed=0, num_bad=0)
    return [dict(rows[i], expected_drop="") for i in PARITY_ROWS]


def parity_edits() -> List[dict]:
    """The edits of the SC rows of :data:`PARITY_ROWS` (``{"id", "sources", "edited", "instruction"}`` with PIL
    images), the ones :func:`overfit_spatialreward` answers with valid judgements."""
    return [{"id": r["id"], "sources": r["sources"], "edited": r["edited"], "instruction": r["instruction"]}
            for r in parity_rows() if r["task"] == "sc"]


def _folder(kind: str, settings: Dict, cache_dir) -> Path:
    digest = hashlib.sha256(json.dumps([BUILD_VERSION, kind, settings], sort_keys=True).encode()).hexdigest()[:12]
    return Path(cache_dir or default_cache_dir()) / "engines" / f"{kind}-{digest}"


def _cached(folder: Path, build: Callable[[Path], None]) -> Path:
    """``folder/export`` once ``build(staging)`` has written ``staging/export``; built at most once per folder."""
    if (folder / "export" / "config.json").is_file():
        return folder / "export"
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        build(staging)
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(staging, folder)
    except OSError:
        if not (folder / "export" / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder / "export"


def random_servable_spatialreward(cache_dir=None) -> Path:
    """The exported random SpatialReward (real Qwen vocabulary, D.1 prompts, head_dim 64; module docstring)."""
    def build(staging: Path) -> None:
        build_tiny_spatialreward(staging / "checkpoint", vocab="qwen", vocab_cache_dir=cache_dir or default_cache_dir(),
                                 hidden_size=128, geometry="vllm", **RANDOM_SETTINGS)
        export_for_vllm(staging / "checkpoint", staging / "export")

    return _cached(_folder("random-spatialreward", RANDOM_SETTINGS, cache_dir), build)


def random_servable_miescore(cache_dir=None) -> Path:
    """The exported random MIEScore (real Qwen vocabulary, head_dim 64, a widened regression head whose scores
    depend on the input) for vLLM's pooling runner with the package's plugin (``scoring.vllm_export``)."""
    def build(staging: Path) -> None:
        build_tiny_miescore(staging / "checkpoint", vocab="qwen", vocab_cache_dir=cache_dir or default_cache_dir(),
                            geometry="vllm", **MIESCORE_SETTINGS)
        export_for_vllm(staging / "checkpoint", staging / "export")

    return _cached(_folder("random-miescore", MIESCORE_SETTINGS, cache_dir), build)


def _repository_file(*parts: str) -> Path:
    return Path(__file__).resolve().parents[1].joinpath(*parts)


def _train(staging: Path) -> None:
    """The base model, the rows, then ``trainers/sft_spatialreward.py`` in a fresh process (as a user runs it)."""
    from datasets import Dataset

    build_tiny_spatialreward(staging / "base", vocab="tiny", hidden_size=64, geometry="vllm", sharpened=False,
                             **OVERFIT_SETTINGS)
    (staging / "rows").mkdir()
    Dataset.from_list(parity_rows()).to_parquet(str(staging / "rows" / "train-00000-of-00001.parquet"))
    recipe = _repository_file("trainers", "sft_spatialreward.py")
    command = [sys.executable, str(recipe), "--config", str(_repository_file("trainers", "configs",
                                                                             "sft_spatialreward_tiny_cpu.yaml")),
               "--model_name_or_path", str(staging / "base"), "--dataset_name", str(staging / "rows"),
               "--output_dir", str(staging / "checkpoint"), *_SFT_ARGS]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=str(recipe.parents[1]))
    if done.returncode != 0:
        raise RuntimeError(f"the SFT recipe failed while building the overfit checkpoint:\n{done.stderr[-3000:]}")
    (staging / "sft.log").write_text(done.stderr[-20000:])


def _check_learnt(checkpoint: Path) -> None:
    """Every parity edit judged in process with both streams parsed and at least one region found."""
    model = load_spatialreward(str(checkpoint), device="cpu", dtype="float32")
    results = model.evaluate_edits(parity_edits(), batch_size=4)
    unlearnt = [r.id for r in results if r.failed]
    if unlearnt or not any(r.regions for r in results):
        raise RuntimeError(f"the overfit SpatialReward did not learn its rows ({unlearnt or 'no regions'}); "
                           f"raw texts: {[r.raw_sc for r in results]}")


def overfit_spatialreward(cache_dir=None) -> Path:
    """The exported SpatialReward overfitted with the SFT recipe on :data:`PARITY_ROWS` (module docstring); a few
    minutes on two CPU cores the first time."""
    def build(staging: Path) -> None:
        _train(staging)
        export_for_vllm(staging / "checkpoint", staging / "export")
        _check_learnt(staging / "export")
        shutil.rmtree(staging / "base", ignore_errors=True)

    settings = {**OVERFIT_SETTINGS, "sft": list(_SFT_ARGS), "rows": list(PARITY_ROWS)}
    return _cached(_folder("overfit-spatialreward", settings, cache_dir), build)
