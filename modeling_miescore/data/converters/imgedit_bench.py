"""ImgEdit-Bench, Basic suite (Ye et al. 2025) -> ``editing`` rows: one editing input per key, for an editor to
answer and ``miescore benchmark imgedit`` to judge.

Release format (read from https://github.com/PKU-YuanGroup/ImgEdit , ``Benchmark/Basic/basic_edit.json`` @c14480a
and ``Benchmark/Basic/basic_bench_readme.md``): one JSON object ``{key: {"id": "<folder>/<file>.jpg", "prompt":
"<instruction>", "edit_type": "<type>"}}``; the source image of a key is ``<origin_img_root>/<id>`` (``basic_bench.py``:
``os.path.join(origin_img_root, item['id'])``), the images coming from ``Benchmark.tar`` of the Hub dataset
``sysuyy/ImgEdit``. Folder names may hold spaces (``daily object/...``) and nest (``compose/human/14.jpg``).
737 keys of 9 types; the released file spells them ``add``, ``remove``, ``replace``, ``alter``, ``background``,
``style``, ``extract``, ``action``, ``compose`` (its README's example says ``adjust`` where the file says
``alter``). The editor's output for a key is ``<key>.png`` (``basic_bench.py``).

``--raw`` is the folder holding ``basic_edit.json``; ``--images`` the folder of the extracted source images,
relative to ``--raw`` (default: ``--raw`` itself). Bad records (not an object, missing fields, an unknown type, a
repeated key, a missing or unreadable image) are listed with their line.

Rows: ``id`` = ``key`` = the JSON key, ``source_images`` = ``[the source image]``, ``instruction`` = ``prompt``,
``category`` = ``edit_type``, ``language`` = ``en``; no subset flags.
"""

from __future__ import annotations

import argparse

from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck
from . import register_converter
from .base import BenchmarkConverter
from .release_files import read_json_keyed_records
from .schema import BenchmarkSpec, EditingItem, EditorBenchmark

__all__ = ["IMGEDIT_TYPES", "ImgEditBenchConverter", "SPEC"]

SPEC = BenchmarkSpec(
    name="imgedit-bench", title="ImgEdit-Bench (Basic)", kinds=("editing",),
    protocol="imgedit", columns={"editors": {"imgedit_ovrl": "mean", "imgedit_delta": "delta"}},
    format_source="https://github.com/PKU-YuanGroup/ImgEdit/tree/main/Benchmark/Basic (basic_edit.json, "
                  "basic_bench.py, basic_bench_readme.md); source images: Benchmark.tar of "
                  "https://huggingface.co/datasets/sysuyy/ImgEdit",
    format_note=("basic_edit.json ({key: {id, prompt, edit_type}}) is read as released, each source image from "
                 "<images>/<id> (the extracted Benchmark.tar; --images, relative to --raw)."),
    dimensions={"mean of the type's three 1-5 criteria": "overall"},
    tie_rule=("basic_bench.py: the judge sees the type's rubric (prompts.json, <edit_prompt> replaced), the source "
              "and the edited image, and answers three 'Name: <1-5>' lines; step1_get_avgscore.py takes the "
              "per-image mean (rounded to 2 places), step2_typescore.py the per-type means (rounded to 2 places). "
              "The scripts define no overall score; the mean over the types is our reading."),
    citation="""@article{ye2025imgedit,
  title   = {ImgEdit: A Unified Image Editing Dataset and Benchmark},
  author  = {Ye, Yang and others},
  journal = {arXiv preprint arXiv:2505.20275},
  year    = {2025}
}""",
    paper_reference="SpatialReward paper, Table 3 (ImgEdit Ovrl.)",
    editor=EditorBenchmark(
        name="imgedit", scores=("mean",), overall="mean", labels={"mean": "Score"}, scale=(1.0, 5.0),
        judge=".imgedit_judge:ImgEditJudge", category_label="Edit type", published_judge="gpt-4o",
        prompts_expected="ImgEdit's prompts.json (a JSON object {edit_type: rubric text containing <edit_prompt>})",
        round_to=2,
        overall_note="Overall = the mean over edit types of the per-type means: our reading (the benchmark's "
                     "scripts define no overall score)."),
)
FILE = "basic_edit.json"
IMGEDIT_TYPES = ("add", "remove", "replace", "alter", "background", "style", "extract", "action", "compose")


@register_converter
class ImgEditBenchConverter(BenchmarkConverter):
    """ImgEdit-Bench Basic basic_edit.json + source images -> editing rows (module docstring)."""

    spec = SPEC
    raw_help = "the folder holding ImgEdit's Benchmark/Basic/basic_edit.json (and the extracted source images)"
    main_file = FILE

    def __init__(self, *args, images: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.images_dir = (images or "").strip().strip("/")

    @classmethod
    def add_builder_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--images", default=None, metavar="SUBDIR",
                            help="folder of the extracted source images (Benchmark.tar), relative to --raw "
                                 "(default: --raw itself); each key's image is <SUBDIR>/<id>")

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        records = read_json_keyed_records(self.raw / FILE, problems, required=("id", "prompt", "edit_type"))
        for line, key, record in self.progress_bar(records, desc="checking keys"):
            check = RecordCheck(problems, FILE, line, images)
            instruction = check.text(record["prompt"], f"{key!r}: prompt must be a non-empty string")
            edit_type = record["edit_type"]
            if edit_type not in IMGEDIT_TYPES:
                check.fail(f"{key!r}: edit_type {edit_type!r} is not one of {', '.join(IMGEDIT_TYPES)}")
            rel = record["id"]
            if not isinstance(rel, str) or not rel.strip():
                check.fail(f"{key!r}: id must be the source image's path (<folder>/<file>.jpg), got {rel!r}")
                continue
            if not key.strip():
                check.fail("a key must be a non-empty string")
            source = self.file_image(check, f"{self.images_dir}/{rel}" if self.images_dir else rel,
                                     f"{key!r}: source image")
            if not check.ok:
                continue
            self.add_editing(EditingItem(id=key, key=key, sources=[source], instruction=instruction.strip(),
                                         category=edit_type, language="en"), (FILE, line), problems)
