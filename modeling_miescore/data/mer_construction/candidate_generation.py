"""MER-Bench candidate generation (SpatialReward paper sec. 4.2): 6 edited images per accepted instruction, each
from a system drawn from a pool (paper: 11 systems, Step1X, Qwen-Edit, OmniGen, FLUX, Bagel, Seedream).

An editing system is named ``NAME=package.module:function`` or ``NAME=diffusers:PIPELINE`` (the forms are in
``docs/mer_bench_construction.md``). Systems run one after the other, so one pipeline is loaded at a time. Each
image is written atomically and only then appended (fsynced) to the ledger ``candidates.jsonl``, so a kill loses
at most the image in progress and never duplicates one.
"""

from __future__ import annotations

import gc
import hashlib
import io
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

from tqdm.auto import tqdm

from ...hub.errors import MIEScoreInputError
from ...hub.image_io import load_image
from ...utils.atomic_files import write_bytes_atomic
from ...utils.import_spec import import_callable
from ...utils.output_lock import exclusive_output
from .instruction_synthesis import INSTRUCTIONS
from .ledger import append_records, read_ledger

__all__ = ["CANDIDATES", "CandidateRun", "EditingSystem", "generate_candidates", "parse_system_spec"]

CANDIDATES = "candidates.jsonl"
CANDIDATES_PER_INSTRUCTION = 6  # sec. 4.2: 6 outputs per instruction


@dataclass(frozen=True)
class EditingSystem:
    name: str
    spec: str  # "module:function" or "diffusers:PIPELINE"

    def load(self, device: str = "auto") -> Callable:
        """The editor callable ``(image, instruction, *, seed) -> PIL.Image``."""
        if self.spec.startswith("diffusers:"):
            return _diffusers_editor(self.spec[len("diffusers:"):], device)
        return import_callable(self.spec, f"editing system {self.name!r}")


def parse_system_spec(text: str) -> EditingSystem:
    """``NAME=module:function`` or ``NAME=diffusers:PIPELINE``; one-line errors otherwise."""
    name, sep, spec = (text or "").partition("=")
    module, colon, attr = spec.partition(":")
    if not sep or not name.strip() or not colon or not module.strip() or not attr.strip():
        raise MIEScoreInputError(f"editing system '{text}' is not NAME=module:function or NAME=diffusers:PIPELINE "
                                 "(e.g. 'FLUX-Dev=diffusers:black-forest-labs/FLUX.1-Kontext-dev')")
    return EditingSystem(name.strip(), spec.strip())


def _diffusers_editor(pipeline: str, device: str) -> Callable:
    try:
        import torch
        from diffusers import DiffusionPipeline
    except ImportError:
        raise MIEScoreInputError("diffusers editing systems need diffusers: pip install diffusers") from None
    pipe = DiffusionPipeline.from_pretrained(pipeline)
    pipe.to(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)

    def edit(image, instruction, *, seed):
        generator = torch.Generator().manual_seed(int(seed))
        return pipe(image=image, prompt=instruction, generator=generator).images[0]

    return edit


@dataclass
class CandidateRun:
    """Candidates made now, made before, and the ones whose editor failed (``(candidate_id, error)``)."""

    made: int = 0
    already_done: int = 0
    failed: List[Tuple[str, str]] = field(default_factory=list)


def _seed_of(seed: int, text: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}|{text}".encode()).digest()[:4], "big")


def plan_candidates(samples: Sequence[Dict[str, Any]], systems: Sequence[EditingSystem], per_instruction: int,
                    seed: int) -> List[Dict[str, Any]]:
    """One slot per candidate: id, sample, system and generation seed (deterministic)."""
    slots = []
    for sample in samples:
        rng = random.Random(_seed_of(seed, sample["id"]))
        order = list(range(len(systems)))
        rng.shuffle(order)
        for j in range(per_instruction):
            cid = f"{sample['id']}-c{j + 1}"
            slots.append({"id": cid, "sample_id": sample["id"], "system": systems[order[j % len(order)]],
                          "seed": _seed_of(seed, cid)})
    return slots


def _make(slot: Dict[str, Any], sample: Dict[str, Any], editor: Callable, out_dir: Path) -> Dict[str, Any]:
    from PIL import Image

    edited = editor(load_image(sample["image"]), sample["instruction"], seed=slot["seed"])
    if not isinstance(edited, Image.Image):
        raise TypeError(f"the editor returned {type(edited).__name__}, not a PIL image")
    rel = f"candidates/{slot['id']}.png"
    buffer = io.BytesIO()
    edited.convert("RGB").save(buffer, format="PNG")
    write_bytes_atomic(out_dir / rel, buffer.getvalue())
    return {"id": slot["id"], "candidate_id": slot["id"], "sample_id": slot["sample_id"],
            "editing_model": slot["system"].name, "image": rel, "seed": slot["seed"]}


def _release(editor) -> None:
    del editor
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def generate_candidates(out_dir, systems: Sequence[EditingSystem], *, per_instruction: int = CANDIDATES_PER_INSTRUCTION,
                        seed: int = 0, device: str = "auto", progress: bool = True) -> CandidateRun:
    """Make the missing candidates of every accepted instruction in ``out_dir`` (module docstring)."""
    out_dir = Path(out_dir)
    if not systems:
        raise MIEScoreInputError("name at least one editing system (NAME=module:function or NAME=diffusers:ID)")
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise MIEScoreInputError(f"editing system names must be unique, got {names}")
    samples = [r for r in read_ledger(out_dir / INSTRUCTIONS).values() if r["status"] == "ok"]
    if not samples:
        raise MIEScoreInputError(f"'{out_dir / INSTRUCTIONS}' holds no accepted instruction; run synthesis first")
    by_id = {s["id"]: s for s in samples}
    ledger = out_dir / CANDIDATES
    run = CandidateRun()
    with exclusive_output(ledger, "construction folder"):
        done = read_ledger(ledger, repair=True)
        slots = plan_candidates(samples, systems, per_instruction, seed)
        todo = [s for s in slots if s["id"] not in done]
        run.already_done = len(slots) - len(todo)
        with tqdm(total=len(slots), initial=run.already_done, desc="mer-candidates", unit="image", file=sys.stderr,
                  disable=not progress) as bar:
            for system in systems:
                mine = [s for s in todo if s["system"] is system]
                if not mine:
                    continue
                editor = system.load(device)
                for slot in mine:
                    try:
                        run.made += append_records(ledger, [_make(slot, by_id[slot["sample_id"]], editor, out_dir)])
                    except Exception as err:  # an editor failure must not lose the other candidates
                        run.failed.append((slot["id"], f"{system.name}: {type(err).__name__}: {err}"))
                    bar.update(1)
                _release(editor)
    return run
