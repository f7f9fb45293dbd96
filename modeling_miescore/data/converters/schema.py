"""The common output schema of converted benchmarks: pointwise and pairwise rows of single-source edits, and
editing inputs (sources + instruction, no edited image) of the editor benchmarks.

Rows are built from :class:`EditItem` / :class:`PairItem` / :class:`EditingItem`; images are :class:`ImageRef` s (a file of the raw
release, or bytes embedded in a Parquet/Arrow release) that are written as ``datasets.Image`` storage values
(original bytes, never re-encoded). :class:`BenchmarkSpec` is what the registry knows about a benchmark
(format source, release folder, kinds, dimension mapping, tie rule, the protocol that scores it, the report columns
it fills; an editor benchmark's judge protocol, :class:`EditorBenchmark`), declared in its converter module; the
dataset card records part of it, ending with the citation that :func:`bibtex` writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from ..builders.raw_files import ImageRef
from ..schema import SCORE_KEYS
from ...utils.import_spec import import_attribute

__all__ = [
    "CONFIGS",
    "EDITING_COLUMNS",
    "EDITOR_JUDGES_PACKAGE",
    "HUMAN_COLUMNS",
    "LABELS",
    "BenchmarkSpec",
    "EditItem",
    "EditorBenchmark",
    "REPORTS",
    "EditingItem",
    "PairItem",
    "JudgeRequestSettings",
    "SPLIT",
    "bibtex",
    "check_declaration",
    "config_features",
]

CONFIGS = ("pointwise", "pairwise", "editing")
SPLIT = "test"  # converted benchmarks are evaluation sets: one split per config
# Pairwise human labels: "a" / "b" preferred, "tie" (equally good, or a plain tie vote), "both_bad" (GenAI-Bench's
# bothbad_vote; kept apart from "tie" so that a protocol may treat them differently).
LABELS = ("a", "b", "tie", "both_bad")
# One column of human scores per MIEScore score key; a benchmark without that dimension leaves it null.
HUMAN_COLUMNS = {key: f"human_{key}" for key in SCORE_KEYS}
# The columns every ``editing`` row has (an editor benchmark's input; the editor writes the edited image), before
# the benchmark's own subset flags (``BenchmarkSpec.subset_flags``, one bool column each). ``id`` is unique in the
# dataset; ``key`` is the benchmark's own key (the same as ``id`` unless the release repeats a key across languages).
EDITING_COLUMNS = ("id", "key", "source_images", "instruction", "category", "language")


@dataclass
class EditItem:
    """One edited image with human scores (a pointwise row); ``human`` maps MIEScore score keys to scores."""

    id: str
    sources: list[ImageRef]
    edited: ImageRef
    instruction: str
    human: dict[str, float] = field(default_factory=dict)
    editing_model: str = ""
    group_id: str = ""
    subset: str = ""


@dataclass
class PairItem:
    """Two edits of the same sources and instruction with a human preference (a pairwise row)."""

    id: str
    sources: list[ImageRef]
    instruction: str
    edited_a: ImageRef
    edited_b: ImageRef
    edited_a_id: str
    edited_b_id: str
    label: str  # one of LABELS
    dimension: str = "overall"  # the MIEScore score key the preference is about
    model_a: str = ""
    model_b: str = ""
    subset: str = ""
    group_id: str = ""


@dataclass
class EditingItem:
    """One editing input of an editor benchmark (an ``editing`` row): sources + instruction, with the benchmark's
    category (task type), instruction language and subset flags (``flags``: flag name -> bool)."""

    id: str
    key: str
    sources: list[ImageRef]
    instruction: str
    category: str
    language: str
    flags: dict[str, bool] = field(default_factory=dict)


# The reports a benchmark can fill, each in a paper's layout (``BenchmarkSpec.columns``): ``zero-shot`` (MIEScore
# paper Table 6, ``miescore benchmark zero-shot``), ``reward`` (SpatialReward paper Table 1, ``benchmark reward``),
# ``editors`` (SpatialReward paper Table 3, ``benchmark editors``). Their published rows and headers are
# :mod:`modeling_miescore.evaluation.published_results`.
REPORTS = ("zero-shot", "reward", "editors")
# The package holding the editor judges that ``EditorBenchmark.judge`` names relative to it.
EDITOR_JUDGES_PACKAGE = "modeling_miescore.evaluation.editor_benchmarks"


PARTS_ORDERS = ("text-first", "images-first")


@dataclass(frozen=True)
class JudgeRequestSettings:
    """How a benchmark's released judge script sends one request to its published judge: the order of the
    content parts (``text-first``: the prompt, then the images; ``images-first``), the ``max_tokens`` and
    ``temperature`` it sends (None: the field is not sent, the endpoint's default applies), and how images travel
    (``image_format``, ``image_quality`` for JPEG / WEBP, ``max_pixels``: None = full size). ``source`` cites the
    script and commit. ``miescore benchmark gedit`` / ``imgedit`` default to these; each is an option."""

    parts_order: str
    max_tokens: int | None
    temperature: float | None
    image_format: str
    image_quality: int | None = None
    max_pixels: int | None = None
    source: str = ""
    seed: int | None = None  # sent as the request's ``seed`` when set (the released scripts send none)

    def __post_init__(self):
        if self.parts_order not in PARTS_ORDERS:
            raise ValueError(f"parts_order must be one of {PARTS_ORDERS}, got {self.parts_order!r}")

    def describe(self) -> dict:
        """``{setting: text}`` of what is sent (the report's request lines; the records' ``request`` label)."""
        lossy = self.image_format.upper() in ("JPEG", "WEBP") and self.image_quality is not None
        return {"parts": self.parts_order,
                "max_tokens": "not sent" if self.max_tokens is None else str(self.max_tokens),
                "temperature": "not sent" if self.temperature is None else f"{self.temperature:g}",
                "images": f"{self.image_format.upper()}{f' quality {self.image_quality}' if lossy else ''}, "
                          f"{'full size' if self.max_pixels is None else f'at most {self.max_pixels} pixels'}",
                **({} if self.seed is None else {"seed": str(self.seed)})}

    def label(self) -> str:
        """One line naming these settings (every judgement record carries it; a resumed run must match)."""
        return "; ".join(f"{k} {v}" for k, v in self.describe().items())

    def differences(self, released: "JudgeRequestSettings") -> list[str]:
        """``"setting: ours (released: theirs)"`` for each setting that differs from ``released``."""
        ours, theirs = self.describe(), released.describe()
        return [f"{k}: {ours[k]} (released: {theirs.get(k, 'not sent')})" for k in ours if ours[k] != theirs.get(k)]


@dataclass(frozen=True)
class EditorBenchmark:
    """An editor benchmark's judge protocol (``BenchmarkSpec.editor``; run by
    :mod:`modeling_miescore.evaluation.editor_benchmarks`).

    ``name``: the ``miescore benchmark`` subcommand (and the protocol's name); ``scores``: the per-sample score keys
    a judgement holds (the overall one is ``overall``); ``labels``: their table headers; ``scale``: the judge's
    answer scale (``min``, ``max``); ``judge``: the MLLM judge class (``module:Class``, relative to
    :data:`EDITOR_JUDGES_PACKAGE`; it also reads the benchmark's prompt file, ``read_prompts``);
    ``resize_to_source``: the edited image is resized to the first source's size before any judge sees it;
    ``round_to``: decimals the released scripts round the per-image and per-category means to (None: no rounding);
    ``subsets``: report subsets besides the full set (``name`` -> the subset flag column); ``comparison_language``:
    the instruction language the editor comparison reads (Table 3: GEdit-EN); ``request``: how the released judge
    script sends its requests (:class:`JudgeRequestSettings`, the defaults of the run); ``report``: the Markdown
    renderer of one editor's run (``module:function``, relative to :data:`EDITOR_JUDGES_PACKAGE`), what
    ``report.md`` of a ``miescore benchmark <name>`` run is rendered by. ``dataset`` and ``title`` are the converted
    benchmark's (filled in from the :class:`BenchmarkSpec` that declares this protocol).
    """

    name: str
    scores: tuple[str, ...]
    overall: str
    labels: dict
    scale: tuple[float, float]
    judge: str
    category_label: str
    published_judge: str
    prompts_expected: str
    resize_to_source: bool = False
    round_to: int | None = None
    subsets: dict | None = None
    comparison_language: str = "en"
    overall_note: str = ""
    request: JudgeRequestSettings | None = None
    report: str = ".editor_report:editor_markdown"
    dataset: str = ""
    title: str = ""

    def judge_class(self):
        """The MLLM judge class this protocol runs (imported on first use)."""
        return import_attribute(self.judge, EDITOR_JUDGES_PACKAGE)

    def report_renderer(self):
        """The function rendering ``report.md`` of one editor's run on this benchmark (imported on first use)."""
        return import_attribute(self.report, EDITOR_JUDGES_PACKAGE)


@dataclass(frozen=True)
class BenchmarkSpec:
    """Everything about one benchmark, declared once in its converter module (``@register_converter``).

    ``dimensions`` maps the benchmark's own dimension names to MIEScore score keys (``visual_quality``,
    ``instruction_following``, ``attribute_preservation``, ``overall``); ``tie_rule`` says how human ties and
    predicted ties count, with its source; ``format_source`` is where the release format was read (URL), and
    ``format_note`` says how exactly the converter's input relates to it.

    The release folder (``--raw``): ``release_folder`` says what it holds (the ``--raw`` help); ``main_file`` is
    the file named when the folder yields no row at all. A release of several files or splits declares the one
    converted by default: ``default_file`` (``--file``, a file or glob inside ``--raw``; ``main_file`` follows the
    chosen file) or ``default_split`` (``--split``); the converter then reads the choice as ``self.choice``.

    ``protocol`` is how predictions are scored: a scoring protocol of
    :data:`modeling_miescore.evaluation.benchmark_protocols.PROTOCOLS` (``calibrated``, ``strict``, ``editscore``,
    ``mmrb2``, ``srcc``; each names the config it reads), or, for an editor benchmark, its ``editor`` protocol's
    name (``gedit``, ``imgedit``). ``columns`` says which report columns it fills: ``{report: {column key: value
    name}}`` with a report of :data:`REPORTS`, a column key of that report's published table (or a new one, headed
    by ``column_headers``) and a value the protocol computes (e.g. ``{"zero-shot": {"genai-bench": "accuracy"}}``).
    """

    name: str
    title: str
    kinds: tuple[str, ...]  # subset of CONFIGS
    format_source: str
    format_note: str
    dimensions: dict[str, str]
    tie_rule: str
    citation: str  # BibTeX (:func:`bibtex`), the card's last section
    paper_reference: str  # which table/column of which paper reports this benchmark
    release_folder: str  # what the --raw folder holds (its --raw help)
    main_file: str = ""  # the file named when the release yields no row (with a default_file: the chosen file)
    default_file: str = ""  # --file: the release file (or glob) inside --raw converted by default
    default_split: str = ""  # --split: the release split converted by default
    license: str = "unknown"
    subset_flags: tuple[str, ...] = ()  # editing rows: the benchmark's subset flags (bool columns)
    protocol: str = ""
    columns: dict[str, dict[str, str]] = field(default_factory=dict)
    column_headers: dict[str, str] = field(default_factory=dict)  # our headers for columns the papers do not print
    editor: EditorBenchmark | None = None

    def __post_init__(self):
        check_declaration(self.name, self.protocol, self.columns, self.column_headers)
        bad = [k for k in self.kinds if k not in CONFIGS]
        if bad or not self.kinds:
            raise ValueError(f"benchmark {self.name!r}: kinds {list(self.kinds)} must be some of {CONFIGS}")
        keys = set(self.dimensions.values()) - set(HUMAN_COLUMNS)
        if keys:
            raise ValueError(f"benchmark {self.name!r}: dimensions map to unknown score keys {sorted(keys)}")
        if self.default_file and self.default_split:
            raise ValueError(f"benchmark {self.name!r}: a release declares a default file or a default split, "
                             "not both")
        if not (self.main_file or self.default_file):
            raise ValueError(f"benchmark {self.name!r}: declare the release's main_file (or its default_file)")
        if ("editing" in self.kinds) != (self.editor is not None):
            raise ValueError(f"benchmark {self.name!r}: an editing benchmark (and only one) declares its editor "
                             "protocol")
        if self.editor is not None:
            if self.protocol != self.editor.name:
                raise ValueError(f"benchmark {self.name!r}: protocol {self.protocol!r} must be its editor "
                                 f"protocol's name {self.editor.name!r}")
            object.__setattr__(self, "editor", replace(self.editor, dataset=self.name, title=self.title))

    @property
    def release_choice(self) -> tuple[str, str] | None:
        """``(option, default)`` of the release part the converter picks (``("file", "*.jsonl")``), or None."""
        if self.default_file:
            return "file", self.default_file
        return ("split", self.default_split) if self.default_split else None

    def to_metadata(self) -> dict:
        """The ``miescore_benchmark`` block of the dataset card (read back by the benchmark runner)."""
        block = {"name": self.name, "title": self.title, "kinds": list(self.kinds),
                 "format_source": self.format_source, "dimensions": dict(self.dimensions),
                 "tie_rule": self.tie_rule, "paper_reference": self.paper_reference}
        if self.subset_flags:
            block["subset_flags"] = list(self.subset_flags)
        return block


def bibtex(kind: str, key: str, **fields) -> str:
    """A BibTeX entry ``@kind{key, ...}``: one ``name = {value}`` line per field, in the order given, the ``=``
    aligned; a tuple value is a name list, joined with ``and`` (``bibtex("article", "ye2025imgedit", title="...",
    author=("Ye, Yang", "others"), year=2025)``)."""
    width = max(map(len, fields))
    values = {name: " and ".join(value) if isinstance(value, tuple) else value for name, value in fields.items()}
    lines = ",\n".join(f"  {name:<{width}} = {{{value}}}" for name, value in values.items())
    return f"@{kind}{{{key},\n{lines}\n}}"


def check_declaration(name: str, protocol: str, columns: dict, column_headers: dict) -> None:
    """A benchmark's ``protocol`` / ``columns`` / ``column_headers`` are well-formed (ValueError naming it)."""
    if not protocol:
        raise ValueError(f"benchmark {name!r} declares no protocol")
    unknown = set(columns) - set(REPORTS)
    if unknown:
        raise ValueError(f"benchmark {name!r}: unknown report(s) {sorted(unknown)}; reports are {REPORTS}")
    declared = {key for report in columns.values() for key in report}
    if set(column_headers) - declared:
        raise ValueError(f"benchmark {name!r}: headers for columns it does not fill: "
                         f"{sorted(set(column_headers) - declared)}")


def config_features(config: str, flags: Sequence[str] = ()):
    """``datasets.Features`` of a row of ``config``: ``pointwise``, ``pairwise`` or ``editing`` (the
    :data:`EDITING_COLUMNS`, then one bool column per subset flag of ``flags``)."""
    from datasets import ClassLabel, Features, Image, List, Value

    text = Value("string")
    if config == "pointwise":
        return Features({"id": text, "source_images": List(Image()), "edited_image": Image(), "instruction": text,
                         "editing_model": text, "group_id": text, "subset": text,
                         **{column: Value("float64") for column in HUMAN_COLUMNS.values()}})
    if config == "pairwise":
        return Features({"id": text, "source_images": List(Image()), "instruction": text, "edited_a": Image(),
                         "edited_b": Image(), "edited_a_id": text, "edited_b_id": text, "model_a": text,
                         "model_b": text, "label": ClassLabel(names=list(LABELS)), "dimension": text, "subset": text,
                         "group_id": text})
    return Features({**dict.fromkeys(EDITING_COLUMNS, text), "source_images": List(Image()),
                     **{flag: Value("bool") for flag in flags}})
