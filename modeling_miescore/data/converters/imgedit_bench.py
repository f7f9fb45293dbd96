"""ImgEdit-Bench, Basic suite (Ye et al. 2025) -> ``editing`` rows: one editing input per key, for an editor to
answer and ``miescore benchmark imgedit`` to judge.

Release format (PKU-YuanGroup/ImgEdit ``Benchmark/Basic/basic_edit.json``, ``basic_bench.py`` and
``basic_bench_readme.md``): one JSON object ``{key: {"id": "<folder>/<file>.jpg", "prompt": "<instruction>",
"edit_type": "<type>"}}``; the source image of a key is ``<origin_img_root>/<id>`` (``basic_bench.py``:
``os.path.join(origin_img_root, item['id'])``), the images coming from ``Benchmark.tar`` of the Hub dataset
``sysuyy/ImgEdit``. Folder names may hold spaces (``daily object/...``) and nest (``compose/human/14.jpg``).
737 keys of 9 types. The editor's output for a key is ``<key>.png`` (``basic_bench.py``).

Two versions of ``basic_edit.json`` were released (:data:`IMGEDIT_RELEASES`; ``--release``, the card records which):

* ``current`` (the default): the file since b3eb8e7 (2025-06-16; unchanged up to 547185d, 2025-09-07), which
  renamed the 94 ``alter`` records ``adjust`` (the keys of ``prompts.json``: ``replace, add, adjust, remove,
  style, action, extract, background, compose``) and rewrote 57 prompts (e.g. key 428 "Extract the flower vase
  from the image.", key 1136 without the mojibake "object鈥檚");
* ``c14480a`` (2025-05-27): the first release, type ``alter``, which the converter maps to ``adjust`` (so the rows'
  categories are always ``prompts.json``'s keys and the two versions compare type by type).

A type spelled as the other version spells it is a problem that names ``--release``. The card also records
whether the file is byte for byte the released one (its sha256).

``--raw`` is the folder holding ``basic_edit.json``; ``--images`` the folder of the extracted source images,
relative to ``--raw`` (default: ``--raw`` itself). Bad records (not an object, missing fields, an unknown type, a
repeated key, a key or prompt with a NUL byte or another control character, a prompt with a chat-control token or
longer than ``MAX_INSTRUCTION_CHARS``, a missing or unreadable image) are listed with their line.

Rows: ``id`` = ``key`` = the JSON key, ``source_images`` = ``[the source image]``, ``instruction`` = ``prompt``,
``category`` = ``edit_type`` (current spelling), ``language`` = ``en``; no subset flags.
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass

from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck
from . import register_converter
from .base import BenchmarkConverter
from .release_files import read_json_keyed_records
from .schema import BenchmarkSpec, EditingItem, EditorBenchmark, JudgeRequestSettings, bibtex

__all__ = ["IMGEDIT_RELEASES", "IMGEDIT_TYPES", "ImgEditBenchConverter", "ImgEditRelease", "SPEC"]

FILE = "basic_edit.json"

SPEC = BenchmarkSpec(
    name="imgedit-bench", title="ImgEdit-Bench (Basic)", kinds=("editing",),
    protocol="imgedit", columns={"editors": {"imgedit_ovrl": "mean", "imgedit_delta": "delta"}},
    format_source="https://github.com/PKU-YuanGroup/ImgEdit/tree/main/Benchmark/Basic (basic_edit.json, "
                  "basic_bench.py, basic_bench_readme.md); source images: Benchmark.tar of "
                  "https://huggingface.co/datasets/sysuyy/ImgEdit",
    format_note=("basic_edit.json ({key: {id, prompt, edit_type}}) is read as released, each source image from "
                 "<images>/<id> (the extracted Benchmark.tar; --images, relative to --raw)."),
    release_folder="the folder holding ImgEdit's Benchmark/Basic/basic_edit.json (and the extracted source images)",
    main_file=FILE,
    dimensions={"mean of the type's three 1-5 criteria": "overall"},
    tie_rule=("basic_bench.py: the judge sees the type's rubric (prompts.json, <edit_prompt> replaced), the source "
              "and the edited image, and answers three 'Name: <1-5>' lines; step1_get_avgscore.py takes the "
              "per-image mean (rounded to 2 places), step2_typescore.py the per-type means (rounded to 2 places); "
              "Overall is the mean over the types, as ImgEdit's leaderboard defines it (assets/leaderboard.png "
              "@2051b15: \"'Overall' is calculated by averaging all scores across tasks. We use GPT-4.1 for "
              "evaluation.\")."),
    citation=bibtex("article", "ye2025imgedit", title="ImgEdit: A Unified Image Editing Dataset and Benchmark",
                    author=("Ye, Yang", "others"), journal="arXiv preprint arXiv:2505.20275", year=2025),
    paper_reference="SpatialReward paper, Table 3 (ImgEdit Ovrl.)",
    editor=EditorBenchmark(
        name="imgedit", scores=("mean",), overall="mean", labels={"mean": "Score"}, scale=(1.0, 5.0),
        judge=".judges:ImgEditJudge", category_label="Edit type", published_judge="gpt-4.1",
        prompts_expected="ImgEdit's prompts.json (a JSON object {edit_type: rubric text containing <edit_prompt>})",
        round_to=2,
        overall_note="Overall = the mean over edit types of the per-type means, as ImgEdit's leaderboard defines it "
                     "(\"averaging all scores across tasks\", assets/leaderboard.png @2051b15; GPT-4.1 judge).",
        request=JudgeRequestSettings(
            parts_order="text-first", max_tokens=None, temperature=None, image_format="PNG",
            source="ImgEdit Benchmark/Basic/basic_bench.py @547185d: one user turn [rubric text, source, edited], "
                   "the image files as data:image/png URLs at full size, no max_tokens and no temperature sent")),
)
# prompts.json's keys (c14480a and later), the rows' categories; the leaderboard prints compose as "Hybrid"
IMGEDIT_TYPES = ("add", "remove", "replace", "adjust", "background", "style", "extract", "action", "compose")


@dataclass(frozen=True)
class ImgEditRelease:
    """One released version of ``basic_edit.json``: its ``commit``, how its file spells the types that
    :data:`IMGEDIT_TYPES` spells otherwise (``renamed``: file spelling -> type), and the file's sha256."""

    name: str
    commit: str
    date: str
    renamed: dict
    sha256: str
    note: str

    def spellings(self) -> dict:
        """The file's type spellings -> the rows' categories."""
        kept = [t for t in IMGEDIT_TYPES if t not in self.renamed.values()]
        return {**{t: t for t in kept}, **self.renamed}


IMGEDIT_RELEASES = {r.name: r for r in (
    ImgEditRelease("current", "b3eb8e7", "2025-06-16", {},
                   "5ee9b7d61e918692416f79896300f738598c83adff8de737b25be4aaff72dc69",
                   "b3eb8e7 and later (unchanged up to 547185d): type 'adjust', 57 prompts corrected"),
    ImgEditRelease("c14480a", "c14480a", "2025-05-27", {"alter": "adjust"},
                   "1a0463aa7f778829c03a927ac61745f427022c2cf91a21e5629818c0535b9204",
                   "the first release: type 'alter', read as 'adjust'"),
)}
DEFAULT_RELEASE = "current"


@register_converter
class ImgEditBenchConverter(BenchmarkConverter):
    """ImgEdit-Bench Basic basic_edit.json + source images -> editing rows (module docstring)."""

    spec = SPEC

    def __init__(self, *args, images: str | None = None, release: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.images_dir = (images or "").strip().strip("/")
        if (release or DEFAULT_RELEASE) not in IMGEDIT_RELEASES:
            raise ValueError(f"release must be one of {', '.join(IMGEDIT_RELEASES)}, got {release!r}")
        self.release = IMGEDIT_RELEASES[release or DEFAULT_RELEASE]
        self.file_sha256: str | None = None

    @classmethod
    def add_builder_arguments(cls, parser: argparse.ArgumentParser) -> None:
        super().add_builder_arguments(parser)
        parser.add_argument("--images", default=None, metavar="SUBDIR",
                            help="folder of the extracted source images (Benchmark.tar), relative to --raw "
                                 "(default: --raw itself); each key's image is <SUBDIR>/<id>")
        parser.add_argument("--release", choices=list(IMGEDIT_RELEASES), default=DEFAULT_RELEASE,
                            help="which version of basic_edit.json --raw holds: "
                                 + "; ".join(f"{r.name}: {r.note}" for r in IMGEDIT_RELEASES.values())
                                 + f" (default: {DEFAULT_RELEASE})")

    def release_metadata(self) -> dict:
        release = self.release
        if self.file_sha256 is None:
            match = ""
        elif self.file_sha256 == release.sha256:
            match = f"; the file is byte for byte the one released at {release.commit}"
        else:
            match = f"; the file differs from the one released at {release.commit} (sha256 {self.file_sha256[:12]})"
        renamed = ", ".join(f"{a!r} read as {b!r}" for a, b in release.renamed.items())
        return {"release_part": f"basic_edit.json of ImgEdit {release.commit} ({release.name}, {release.date})"
                                f"{'; edit type ' + renamed if renamed else ''}{match}",
                "imgedit_release": release.name, "imgedit_release_commit": release.commit}

    def _edit_type(self, value, key: str, check: RecordCheck) -> str | None:
        spellings = self.release.spellings()
        if value in spellings:
            return spellings[value]
        other = [r for r in IMGEDIT_RELEASES.values() if r is not self.release and value in r.spellings()]
        hint = (f"; it is how ImgEdit {other[0].commit} spells it: pass --release {other[0].name}" if other else "")
        check.fail(f"{key!r}: edit_type {value!r} is not one of {', '.join(spellings)} (ImgEdit {self.release.commit}"
                   f", --release {self.release.name}){hint}")
        return None

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        if (self.raw / FILE).is_file():
            with open(self.raw / FILE, "rb") as handle:
                self.file_sha256 = hashlib.file_digest(handle, "sha256").hexdigest()
        records = read_json_keyed_records(self.raw / FILE, problems, required=("id", "prompt", "edit_type"))
        for line, key, record in self.progress_bar(records, desc="checking keys"):
            check = RecordCheck(problems, FILE, line, images)
            instruction = check.instruction(record["prompt"], f"{key!r}: prompt")
            edit_type = self._edit_type(record["edit_type"], key, check)
            check.record_id(key, "key")
            rel = record["id"]
            if not isinstance(rel, str) or not rel.strip():
                check.fail(f"{key!r}: id must be the source image's path (<folder>/<file>.jpg), got {rel!r}")
                continue
            source = check.image(f"{self.images_dir}/{rel}" if self.images_dir else rel,
                                     f"{key!r}: source image")
            if not check.ok:
                continue
            self.add(EditingItem(id=key, key=key, sources=[source], instruction=instruction.strip(),
                                 category=edit_type, language="en"), (FILE, line), problems)
