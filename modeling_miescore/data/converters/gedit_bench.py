"""GEdit-Bench (Liu et al. 2025, Step1X-Edit) -> ``editing`` rows: one editing input per instruction, for an editor
to answer and ``miescore benchmark gedit`` to judge.

Release format (read from the Hub dataset https://huggingface.co/datasets/stepfun-ai/GEdit-Bench , split ``train``,
and the authors' example https://github.com/stepfun-ai/Step1X-Edit/blob/main/GEdit-Bench/generate_image_example.py ,
whose comment lists the columns): ``task_type`` (string, one of the 11 task types), ``key`` (string), ``instruction``,
``instruction_language`` (``en`` / ``cn``: the value itself names the folders ``fullset/<task>/<lang>/`` of the
example), ``input_image`` (Image), ``input_image_raw`` (Image), ``Intersection_exist`` (bool). 606 items per language
and these task types (counts per language from the evalscope GEdit-Bench page,
https://evalscope.readthedocs.io/en/v1.6.0/benchmarks/gedit.html): background_change 40, color_alter 40,
material_alter 40, motion_change 40, ps_human 70, style_change 60, subject-add 60, subject-remove 57,
subject-replace 60, text_change 99, tone_transfer 40.

Files read: Parquet shards ``data/train-*.parquet`` (the Hub's datasets layout), or, when there are none, the
``datasets`` ``save_to_disk`` Arrow files (``train/state.json`` + ``data-*.arrow``, or ``state.json`` at the top;
the Hub page lists the release's format as Arrow). A column outside the seven above, or one of them missing, is
a problem naming the file and the column.

Rows: ``id`` = ``key``, ``source_images`` = ``[input_image]`` (the image the example saves as ``<key>_SRCIMG.png``
and GEdit's scorer judges against; ``input_image_raw`` is the unresized original, not kept), ``instruction``,
``category`` = ``task_type``, ``language`` = ``instruction_language``, ``intersection_exist`` =
``Intersection_exist``. An instruction the dataset builders would refuse (a NUL byte or another control character,
a chat-control token, more than ``MAX_INSTRUCTION_CHARS`` characters) is a problem naming its row. If the release
uses one key in both languages, every ``id`` becomes ``<key>_<language>``
(``key`` keeps the benchmark key, and GEdit's folder layout still finds each edit); a key repeated within one
language is a problem.
"""

from __future__ import annotations

from collections import Counter

from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck
from . import register_converter
from .base import BenchmarkConverter
from .release_files import embedded_image, read_parquet_rows, read_saved_dataset
from .schema import BenchmarkSpec, EditingItem, EditorBenchmark, JudgeRequestSettings, bibtex

__all__ = ["COLUMNS", "GEDIT_LANGUAGES", "GEDIT_TASK_TYPES", "GEditBenchConverter", "SPEC"]

SPEC = BenchmarkSpec(
    name="gedit-bench", title="GEdit-Bench", kinds=("editing",), license="mit", subset_flags=("intersection_exist",),
    protocol="gedit",
    columns={"editors": {"gedit_sc": "sc", "gedit_pq": "pq", "gedit_ovrl": "o", "gedit_delta": "delta"}},
    format_source="https://huggingface.co/datasets/stepfun-ai/GEdit-Bench (split train); "
                  "https://github.com/stepfun-ai/Step1X-Edit/blob/main/GEdit-Bench/generate_image_example.py",
    format_note=("The converter reads the release as downloaded: Parquet shards data/train-*.parquet, or the "
                 "datasets save_to_disk Arrow files (train/state.json + data-*.arrow; the Hub page lists the format "
                 "as Arrow). source_images holds input_image, the image GEdit's scripts save as <key>_SRCIMG.png "
                 "and judge against; input_image_raw is not kept."),
    release_folder="the downloaded stepfun-ai/GEdit-Bench folder (data/train-*.parquet, or train/ saved as Arrow)",
    main_file="data",
    dimensions={"SC (semantic consistency, 0-10)": "instruction_following",
                "PQ (perceptual quality, 0-10)": "visual_quality", "O = sqrt(SC * PQ)": "overall"},
    tie_rule=("VIEScore task 'tie' (TIGER-AI-Lab/VIEScore viescore/__init__.py): SC = min(editing success, "
              "over-editing) from [source, edited] + instruction, PQ = min(naturalness, artifacts) from the edited "
              "image alone, both 0-10, O = sqrt(SC * PQ) per sample; the edited image is resized to the source's "
              "size first; SC, PQ and O are averaged per task type, then over the 11 task types (unweighted), for "
              "the full set and the Intersection_exist subset, per instruction language."),
    citation=bibtex("article", "liu2025step1xedit",
                    title="Step1X-Edit: A Practical Framework for General Image Editing",
                    author=("Liu, Shiyu", "others"), journal="arXiv preprint arXiv:2504.17761", year=2025),
    paper_reference="SpatialReward paper, Table 3 (GEdit-EN SC / PQ / Ovrl.)",
    editor=EditorBenchmark(
        name="gedit", scores=("sc", "pq", "o"), overall="o", labels={"sc": "SC", "pq": "PQ", "o": "O"},
        scale=(0.0, 10.0), judge=".judges:GEditJudge", category_label="Task type", published_judge="gpt-4.1",
        prompts_expected="VIEScore's prompt module viescore/vie_prompts.py (a Python file assigning the strings "
                         "_context_no_delimit, _prompts_0shot_two_image_edit_rule, _prompts_0shot_tie_rule_SC and "
                         "_prompts_0shot_rule_PQ)",
        resize_to_source=True, subsets={"intersection": "intersection_exist"},
        overall_note="O = sqrt(SC * PQ) per sample; each column is the unweighted mean over task types of the "
                     "per-type means.",
        request=JudgeRequestSettings(
            parts_order="text-first", max_tokens=1400, temperature=None, image_format="JPEG", image_quality=75,
            source="Step1X-Edit GEdit-Bench/viescore/mllm_tools/openai.py @570eba6, the GPT-4.1 path "
                   "(viescore/__init__.py: backbone gpt4o -> GPT4o(model_name='gpt-4.1')): prepare_prompt appends "
                   "the text part first, then the images; get_parsed_output sends max_tokens 1400 and no "
                   "temperature; encode_pil_image saves each image as JPEG with Pillow's default quality (75) at "
                   "full size. The Qwen2.5-VL-72B path (mllm_tools/qwen25vl_eval.py) puts the images first")),
)

COLUMNS = ("task_type", "key", "instruction", "instruction_language", "input_image", "input_image_raw",
           "Intersection_exist")
GEDIT_TASK_TYPES = ("background_change", "color_alter", "material_alter", "motion_change", "ps_human",
                    "style_change", "subject-add", "subject-remove", "subject-replace", "text_change", "tone_transfer")
GEDIT_LANGUAGES = ("en", "cn")
PARQUET = "data/train-*.parquet"


@register_converter
class GEditBenchConverter(BenchmarkConverter):
    """GEdit-Bench's train split (Parquet shards or save_to_disk Arrow) -> editing rows (module docstring)."""

    spec = SPEC

    def _rows(self, problems: ProblemCollector) -> list[tuple[str, int, dict]]:
        files = sorted(p for p in self.raw.glob(PARQUET) if p.is_file())
        if files:
            rows = read_parquet_rows(self.raw, files, problems, required=COLUMNS)
        else:
            folder = next((f for f in (self.raw / "train", self.raw) if (f / "state.json").is_file()), None)
            if folder is None:
                problems.add(PARQUET, None, f"no file matches {PARQUET!r} and no train/state.json (save_to_disk "
                                            f"Arrow) in the raw folder; {self.raw_help}")
                return []
            rows = [((folder / file).relative_to(self.raw).as_posix(), row, record)
                    for file, row, record in read_saved_dataset(folder, problems, required=COLUMNS)]
        unknown: dict[str, set[str]] = {}
        for file, _, record in rows:
            unknown.setdefault(file, set()).update(set(record) - set(COLUMNS))
        for file, names in unknown.items():
            if names:
                problems.add(file, None, f"unknown column(s) {', '.join(map(repr, sorted(names)))}; GEdit-Bench's "
                                         f"release has exactly {', '.join(COLUMNS)}")
        return [] if any(unknown.values()) else rows

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        rows = self._rows(problems)
        items: list[tuple[tuple[str, int], EditingItem]] = []
        for file, row, record in self.progress_bar(rows, desc="checking rows"):
            check = RecordCheck(problems, file, row, images)
            key = check.text(record["key"], "key must be a non-empty string")
            key = check.record_id(key.strip(), "key") if key is not None else None
            instruction = check.instruction(record["instruction"], "instruction")
            task = check.choice({t: t for t in GEDIT_TASK_TYPES}, record["task_type"], "task_type")
            language = check.choice({x: x for x in GEDIT_LANGUAGES}, record["instruction_language"],
                                    "instruction_language")
            flag = record["Intersection_exist"]
            if not isinstance(flag, bool):
                check.fail(f"Intersection_exist must be true or false, got {flag!r}")
            source = embedded_image(check, record["input_image"], f"{key}-source", "input_image")
            if not check.ok:
                continue
            items.append(((file, row), EditingItem(id=key, key=key, sources=[source], instruction=instruction.strip(),
                                                   category=task, language=language,
                                                   flags={"intersection_exist": flag})))
        per_key = Counter(item.key for _, item in items)
        shared = any(n > 1 for n in per_key.values())
        if shared:
            self.warnings.append("the release uses one key in several languages: ids are <key>_<language>")
        for where, item in items:
            if shared:
                item.id = f"{item.key}_{item.language}"
            self.add(item, where, problems)
