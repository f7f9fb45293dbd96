"""Raw releases of the editor benchmarks (GEdit-Bench, ImgEdit-Bench Basic) in their exact layouts, from
scikit-image photos, plus stand-ins for the benchmarks' judge-prompt files, for the converter and benchmark tests.

* :func:`make_raw_gedit_bench`: the Hub dataset's train split with the seven released columns, as Parquet shards
  ``data/train-*.parquet`` or as a ``save_to_disk`` folder ``train/`` (Arrow).
* :func:`make_raw_imgedit_bench`: ``basic_edit.json`` (``{key: {id, prompt, edit_type}}``, indented as released) and
  the source images at ``<images>/<id>``, folder names with spaces and nesting as in the release.
* :func:`write_vie_prompts_module` / :func:`write_imgedit_prompts_json`: files shaped like VIEScore's
  ``vie_prompts.py`` (module-level string assignments, the names VIEScore's ``tie`` task joins) and ImgEdit's
  ``prompts.json`` (``{edit_type: rubric with <edit_prompt>}``). Their texts are short placeholders written here,
  not the benchmarks' prompts (those are read from the user's copy and never shipped).

Each ``make_raw_*`` returns the planted truth (one dict per row) so that tests can check the converted rows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .external_images import source_photo, write_parquet
from .photos import image_bytes, save_jpeg
from ...data.converters.imgedit_bench import IMGEDIT_RELEASES

__all__ = ["IMGEDIT_PROMPTS_KEYS", "make_raw_gedit_bench", "make_raw_imgedit_bench", "write_imgedit_prompts_json",
           "write_vie_prompts_module"]

GEDIT_FIXTURE_TASKS = {"background_change": 2, "subject-add": 2, "text_change": 1}
IMGEDIT_FOLDERS = {"add": "for_add", "remove": "daily object", "compose": "compose/human"}


def _gedit_features():
    from datasets import Features, Image, Value

    return Features({"task_type": Value("string"), "key": Value("string"), "instruction": Value("string"),
                     "instruction_language": Value("string"), "input_image": Image(), "input_image_raw": Image(),
                     "Intersection_exist": Value("bool")})


def make_raw_gedit_bench(dir: str | os.PathLike, tasks: dict[str, int] | None = None, languages=("en", "cn"),
                         layout: str = "parquet", shared_keys: bool = False, source_side: int = 40) -> list[dict]:
    """GEdit-Bench's train split: ``tasks`` (task type -> items per language), each item in every language.

    Keys are 32-hex-digit strings like the release's, distinct per language unless ``shared_keys`` (the same key in
    both languages). ``Intersection_exist`` is true for every item whose index within its task is even. ``layout``:
    ``"parquet"`` (``data/train-00000-of-00001.parquet``) or ``"arrow"`` (``train/`` written by ``save_to_disk``).
    Sources are squares of ``source_side`` px (+8 for every other photo); editors with a minimum
    reference size (Flux2-Klein: 64 px) need ``source_side >= 64``.
    Returns one dict per row: ``key``, ``task_type``, ``language``, ``instruction``, ``intersection_exist``,
    ``source_size``.
    """
    import hashlib

    rows, truth = [], []
    photo = 0
    for task, count in (tasks or GEDIT_FIXTURE_TASKS).items():
        for i in range(count):
            source = source_photo(photo, size=source_side + 8 * (photo % 2))
            raw = source.resize((source.width * 2, source.height * 2))
            photo += 1
            for language in languages:
                seed = f"{task}-{i}" + ("" if shared_keys else f"-{language}")
                key = hashlib.md5(seed.encode()).hexdigest()
                instruction = f"{task.replace('_', ' ')} {i} ({language})"
                rows.append({"task_type": task, "key": key, "instruction": instruction,
                             "instruction_language": language,
                             "input_image": {"bytes": image_bytes(source, format="PNG"), "path": None},
                             "input_image_raw": {"bytes": image_bytes(raw), "path": None},
                             "Intersection_exist": i % 2 == 0})
                truth.append({"key": key, "task_type": task, "language": language, "instruction": instruction,
                              "intersection_exist": i % 2 == 0, "source_size": source.size})
    root = Path(dir)
    if layout == "parquet":
        write_parquet(root / "data" / "train-00000-of-00001.parquet", rows, _gedit_features())
    elif layout == "arrow":
        from datasets import Dataset

        Dataset.from_list(rows, features=_gedit_features()).save_to_disk(str(root / "train"))
    else:
        raise ValueError(f"layout must be 'parquet' or 'arrow', got {layout!r}")
    return truth


def make_raw_imgedit_bench(dir: str | os.PathLike, types=("add", "remove", "compose"), per_type: int = 2,
                           images: str = "", source_side: int = 48, release: str = "current") -> list[dict]:
    """``basic_edit.json`` with ``per_type`` keys of each edit type (numeric string keys, not in order, as released)
    and the source JPEGs (squares of ``source_side`` px) under ``<dir>/<images>/<id>``. ``types`` are the current
    spellings (``prompts.json``'s keys); the file spells them as ``release`` does (``c14480a``: ``adjust`` is
    written ``alter``). Returns one dict per key: ``key``, ``id``, ``prompt``, ``edit_type`` (as written),
    ``category`` (the current spelling), ``source_size``."""
    written = {category: spelling for spelling, category in IMGEDIT_RELEASES[release].spellings().items()}
    root = Path(dir)
    entries, truth = {}, []
    for t, category in enumerate(types):
        edit_type = written[category]
        folder = IMGEDIT_FOLDERS.get(category, category)
        for i in range(per_type):
            key = str(1000 - 37 * (t * per_type + i))
            rel = f"{folder}/{t * per_type + i:09d}.jpg"
            source = source_photo(t * per_type + i, size=source_side)
            save_jpeg(source, root / images / rel)
            entries[key] = {"id": rel, "prompt": f"{edit_type} something {i}.", "edit_type": edit_type}
            truth.append({"key": key, **entries[key], "category": category, "source_size": source.size})
    root.mkdir(parents=True, exist_ok=True)
    (root / "basic_edit.json").write_text(json.dumps(entries, indent=4) + "\n", encoding="utf-8")
    return truth


def write_vie_prompts_module(path: str | os.PathLike, *, drop: str | None = None) -> Path:
    """A Python file shaped like VIEScore's ``vie_prompts.py``: the four module-level strings that the ``tie`` task
    joins (placeholder texts; the SC rule holds ``<instruction>``); ``drop`` leaves one name out."""
    texts = {
        "_context_no_delimit": "PLACEHOLDER CONTEXT: answer with {\"score\": [...], \"reasoning\": \"...\"}.",
        "_prompts_0shot_two_image_edit_rule": "PLACEHOLDER RULE: the first image is the source, the second the edit.",
        "_prompts_0shot_tie_rule_SC": "PLACEHOLDER SC: two scores 0-10.\nEditing instruction: <instruction>\n",
        "_prompts_0shot_rule_PQ": "PLACEHOLDER PQ: naturalness and artifacts, 0-10.",
    }
    lines = ["# a stand-in for viescore/vie_prompts.py (module-level strings only)", "import os", ""]
    lines += [f"{name} = {json.dumps(text)}" for name, text in texts.items() if name != drop]
    lines += ["", "print('this module must never be imported by miescore')", ""]
    path = Path(path)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


# the keys of ImgEdit's Benchmark/Basic/prompts.json (c14480a and later), in the file's order
IMGEDIT_PROMPTS_KEYS = ("replace", "add", "adjust", "remove", "style", "action", "extract", "background", "compose")


def write_imgedit_prompts_json(path: str | os.PathLike, types=IMGEDIT_PROMPTS_KEYS) -> Path:
    """A file shaped like ImgEdit's ``prompts.json``: one placeholder rubric per edit type (by default the released
    file's nine keys, in its order), ``<edit_prompt>`` in it, asking for three ``Name: <1-5>`` lines."""
    rubric = ("PLACEHOLDER {t} RUBRIC. Instruction: <edit_prompt>\nAnswer:\nBrief reasoning: ...\n"
              "Criterion A: <1-5>\nCriterion B: <1-5>\nCriterion C: <1-5>")
    path = Path(path)
    path.write_text(json.dumps({t: rubric.format(t=t) for t in types}, indent=2), encoding="utf-8")
    return path
