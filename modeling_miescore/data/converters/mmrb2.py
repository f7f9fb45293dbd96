"""MMRB2 image editing (Multimodal RewardBench 2, Hu et al. 2025) -> pairwise edits with one or more sources.

Release format (read from https://github.com/facebookresearch/MMRB2 : ``benchmark/edit.json`` and
``benchmark/README.md``): after the release build (``benchmark/run_release.sh``) the folder holds ``edit.json``,
``images/`` (responses) and ``input_images/`` (prompts). ``edit.json`` is ``{"pairs": [...]}``, each pair::

    {"id": str, "prompt_source": str, "prompt_metadata": {...},
     "prompt_content": [["image", "input_images/....jpg"], ..., ["text", "<instruction>"]],
     "response_a": {"model_name": str, "response_content": [["image", "images/..._0.jpg"]]},
     "response_b": {...}, "chosen": "A" | "B", "human_annotations": [int, ...]}

(the README's schema names ``pair_id`` / ``human_preference`` / ``model``; the released file uses ``id`` /
``chosen`` / ``model_name``: both are accepted).

Rows: one pairwise row per pair; sources = every prompt image in order (one for *single*-image edits, several for
*multi*-image ones; ``subset`` = ``single`` / ``multi``, the split of the SpatialReward paper's Table 1),
instruction = the prompt's text parts joined by newlines, ``edited_a`` / ``edited_b`` = the image of each
response, label ``a`` / ``b`` from ``chosen``.

``group_id`` (the instance that ``miescore judge --dataset`` and ``spatialreward-data`` export the sources of) is
``<prompt_source>/<key of the pair's own source paths and instruction>``: pairs share a group only when they share
their prompt. ``prompt_source`` alone names the *origin* of a prompt (``dreambench``, ``emu-edit``,
``new_synthetic_edit``, ...: six values for 684 different source sets in the release) and is not an instance.

A pair whose response holds several images is refused and counted in the conversion's warnings (card and console):
a pointwise scorer rates one edited image, and keeping only the first one would score a different output than the
annotators saw.
"""

from __future__ import annotations

from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck
from . import register_converter
from .base import BenchmarkConverter, content_key
from .release_files import read_json_records
from .schema import BenchmarkSpec, PairItem, bibtex

__all__ = ["MMRB2Converter", "SPEC"]

FILE = "edit.json"

SPEC = BenchmarkSpec(
    name="mmrb2", title="MMRB2 (image editing)", kinds=("pairwise",),
    protocol="mmrb2", columns={"reward": {"mmrb2_single": "single", "mmrb2_multi": "multi", "mmrb2_ovrl": "overall"}},
    format_source="https://github.com/facebookresearch/MMRB2/tree/main/benchmark (edit.json, README.md)",
    format_note="The converter reads the built release folder (edit.json, images/, input_images/) as is.",
    release_folder="the built MMRB2 benchmark folder (edit.json, images/, input_images/)", main_file=FILE,
    dimensions={"chosen (overall preference)": "overall"},
    tie_rule=("Human: no ties (chosen is A or B). Prediction: correct only when the chosen response scores strictly "
              "higher; a predicted tie is wrong (MMRB2's compute_accuracy.py counts any verdict other than A/B as "
              "wrong; it judges each pair in both orders, which for a pointwise scorer gives the same verdict "
              "twice, so the accuracy is unchanged). Single / Multi = pairs with one / several input images; "
              "Ovrl. = all pairs (micro)."),
    citation=bibtex("article", "hu2025mmrb2",
                    title="Multimodal RewardBench 2: Evaluating Omni Reward Models for Interleaved Text and Image",
                    author=("Hu, Yushi", "Askari-Hemmat, Reyhane", "Hall, Melissa", "Dinan, Emily", "Zettlemoyer, Luke",
                            "Ghazvininejad, Marjan"), journal="arXiv preprint arXiv:2512.16899", year=2025),
    paper_reference="SpatialReward paper, Table 1 (MMRB2 (ImgEdit) Single / Multi / Ovrl.)",
)


def _parts(content, kind: str) -> list:
    if not isinstance(content, list):
        return []
    return [part[1] for part in content if isinstance(part, list) and len(part) == 2 and part[0] == kind]


@register_converter
class MMRB2Converter(BenchmarkConverter):
    """MMRB2 edit.json + images -> pairwise rows (see the module docstring)."""

    spec = SPEC

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        records = read_json_records(self.raw / FILE, problems, key="pairs")
        several: list[str] = []
        for line, record in self.progress_bar(records, desc="checking pairs"):
            check = RecordCheck(problems, FILE, line, images)
            pair_id = record.get("id", record.get("pair_id"))
            chosen = record.get("chosen", record.get("human_preference"))
            if not isinstance(pair_id, str) or not pair_id:
                check.fail("id (or pair_id) must be a non-empty string")
            if chosen not in ("A", "B"):
                check.fail(f"chosen (or human_preference) must be 'A' or 'B', got {chosen!r}")
            texts = [t for t in _parts(record.get("prompt_content"), "text") if isinstance(t, str) and t.strip()]
            source_paths = _parts(record.get("prompt_content"), "image")
            if not texts or not source_paths:
                check.fail("prompt_content must hold at least one image and one text part")
            responses = [record.get(key) if isinstance(record.get(key), dict) else {}
                         for key in ("response_a", "response_b")]
            outputs = [_parts(r.get("response_content"), "image") for r in responses]
            if not all(outputs):
                check.fail("response_a and response_b must each hold an image")
            if not check.ok:
                continue
            if any(len(out) > 1 for out in outputs):
                several.append(pair_id)
                continue
            sources = [check.image(path, f"prompt image {k + 1}") for k, path in enumerate(source_paths)]
            edited = [check.image(out[0], f"response_{side} image") for side, out in zip("ab", outputs)]
            if not check.ok:
                continue
            instruction = "\n".join(t.strip() for t in texts)
            models = [str(r.get("model_name", r.get("model")) or "") for r in responses]
            origin = str(record.get("prompt_source") or "mmrb2")
            self.add(PairItem(
                id=pair_id, sources=sources, instruction=instruction, edited_a=edited[0],
                edited_b=edited[1], edited_a_id=f"{pair_id}_A", edited_b_id=f"{pair_id}_B", label=chosen.lower(),
                model_a=models[0], model_b=models[1], subset="single" if len(sources) == 1 else "multi",
                group_id=f"{origin}/{content_key([s.rel for s in sources], instruction)}"), (FILE, line), problems)
        if several:
            shown = ", ".join(several[:5]) + (", ..." if len(several) > 5 else "")
            self.warnings.append(f"{len(several)} pair(s) refused: a response holds several images, and a pointwise "
                                 f"scorer rates one ({shown})")
