"""Shared pieces of the MER-Bench construction tests: source images, a scripted D.3 instruction writer (as a chat
server answer and as an in-process backend) and a folder built through synthesis and candidate generation."""

from __future__ import annotations

import json
import re
from pathlib import Path

from PIL import Image

from modeling_miescore.data.mer_construction import generate_candidates, parse_system_spec, plan_jobs, read_sources
from modeling_miescore.data.mer_construction.instruction_synthesis import synthesize_instructions
from modeling_miescore.judges.call_engine import CallEngine
from modeling_miescore.judges.chat_client import ChatCompletion

BASE_WIDTH = 40  # source image i is BASE_WIDTH + i pixels wide: the scripted writer recognises it by its size
TOY_SYSTEMS = ("tint=modeling_miescore.testing.toy_editors:tint", "mirror=modeling_miescore.testing.toy_editors:mirror",
               "blur=modeling_miescore.testing.toy_editors:blur")


def write_sources(folder: Path, n_general: int, n_human: int) -> Path:
    """Images and a JSONL manifest; returns the manifest path."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n_general + n_human):
        domain = "general" if i < n_general else "human"
        name = f"src{i:02d}.png"
        Image.new("RGB", (BASE_WIDTH + i, 48), ((37 * i) % 256, 90, 160)).save(folder / name)
        lines.append(json.dumps({"image_id": f"img{i:02d}", "image": name, "domain": domain}))
    manifest = folder / "sources.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def num_edits_asked(text: str) -> int:
    return int(re.search(r"(?:exactly|with) (\d) edits", text).group(1))


def good_answer(text: str, num_edits: int | None = None, index: int = 0) -> str:
    """A well-formed D.3 answer for a prompt (``num_edits`` overrides the count the prompt asks for)."""
    n = num_edits_asked(text) if num_edits is None else num_edits
    regions = [{"region_id": k + 1, "description": f"region {k}", "bbox": [10 * k, 10 * k, 10 * k + 100, 10 * k + 90]}
               for k in range(n)]
    answer = {"is_editable": True, "reason": "clear scene", "edit_regions": regions,
              "edit_instruction": f"Image {index}: " + "; ".join(f"change region {k}" for k in range(n)),
              "num_edits": n}
    return "```json\n" + json.dumps(answer) + "\n```"


class ScriptedWriterBackend:
    """An in-process call-engine backend answering every D.3 request well."""

    model = "scripted-writer"
    batch_size = 4
    max_concurrency = 1

    def identity(self):
        return {"kind": "scripted", "model": self.model}

    def complete_batch(self, requests):
        out = []
        for request in requests:
            text = next(p for p in request.parts if isinstance(p, str))
            image = next(p for p in request.parts if not isinstance(p, str))
            out.append(ChatCompletion(good_answer(text, index=image.width - BASE_WIDTH), 10, 5, "stop"))
        return out


def construction_folder(tmp_path: Path, n_general: int = 2, n_human: int = 2, per_instruction: int = 6) -> Path:
    """A construction folder with accepted instructions and candidates from the toy editors."""
    manifest = write_sources(tmp_path / "sources", n_general, n_human)
    folder = tmp_path / "work"
    jobs = plan_jobs(read_sources(manifest), seed=0)
    synthesize_instructions(jobs, folder, CallEngine(ScriptedWriterBackend()), progress=False)
    run = generate_candidates(folder, [parse_system_spec(s) for s in TOY_SYSTEMS], per_instruction=per_instruction,
                              progress=False)
    assert not run.failed
    return folder


FLAKY_CALLS = {"count": 0}


def flaky_editor(image, instruction, *, seed):
    """Fails every other call (an editing API that sometimes errors)."""
    FLAKY_CALLS["count"] += 1
    if FLAKY_CALLS["count"] % 2 == 0:
        raise RuntimeError("the editing service is busy")
    return image.convert("RGB").rotate(90)


def not_an_image(image, instruction, *, seed):
    return "edited.png"


# Planned tiers per candidate slot (overall, sc, pq): two of each overall tier, the twins told apart by SC / PQ,
# so one sample can give a 2-, 3- and 4-pair group (sec. 4.3).
PLANNED_TIERS = (("Good", "Good", "Good"), ("Good", "Medium", "Good"), ("Medium", "Medium", "Medium"),
                 ("Medium", "Good", "Medium"), ("Poor", "Poor", "Poor"), ("Poor", "Medium", "Poor"))


def form_values(n_candidates: int, annotator: int = 0, split_slot: int | None = None) -> list:
    """The radio values of one submission (per slot: SC, PQ, overall), as the app's form sends them.
    ``split_slot``: that candidate's overall vote depends on the annotator (no 3-of-5 majority)."""
    values = []
    for slot in range(n_candidates):
        overall, sc, pq = PLANNED_TIERS[slot % len(PLANNED_TIERS)]
        if slot == split_slot:
            overall = ("Good", "Good", "Medium", "Medium", "Poor")[annotator % 5]
        values += [sc, pq, overall]
    return values
