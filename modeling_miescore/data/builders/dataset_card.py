"""Dataset cards: ``huggingface_hub.DatasetCardData`` metadata rendered through a Jinja template into README.md.

The metadata carries ``configs`` (which Parquet files make which split) and ``dataset_info`` (features, split
sizes), so that ``datasets.load_dataset(folder)`` needs no loading script (datasets 5 runs none) and the Hub
shows the schema. The ``features`` block is written in the Hub's card format (a list of ``{name, dtype}``
entries, see https://huggingface.co/docs/hub/datasets-cards), built from the public
``datasets.Features.to_dict()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...utils.markdown_table import markdown_table as md_table  # the cards' name for the one table builder

__all__ = [
    "EDIT_RATING_TASK_CATEGORIES",
    "CardSpec",
    "dataset_card_data",
    "features_yaml",
    "md_table",
    "size_category",
    "write_dataset_card",
]


# ``task_categories`` must be ids of the Hub's task list (PIPELINE_DATA in huggingface.js,
# packages/tasks/src/pipelines.ts). None names rating or preference data, so both datasets are filed under the
# task whose outputs they rate, instruction-guided editing ("image-to-image"), and the task of the judges they
# train and test, which read images and an instruction and answer with scores or an order ("image-text-to-text").
# What the labels are (MOS, rankings) is said by the tags.
EDIT_RATING_TASK_CATEGORIES = ("image-to-image", "image-text-to-text")


@dataclass(frozen=True)
class CardSpec:
    """What a dataset's card says besides its data: the Jinja template and the Hub metadata.

    Every template also gets ``repo_id`` (the ``push_to_hub`` repository, else ``repo_placeholder``) and
    ``splits`` (the splits this build has, in order) for its usage snippet, and ``column_table`` (``columns``
    as a Markdown table).
    """

    template: str  # ``{{ card_data }}`` is the YAML metadata; the builder's card_context fills the rest
    pretty_name: str
    citation: str  # BibTeX, shown in the card's last section
    repo_placeholder: str  # the repo id in the usage snippet of a build that is not pushed
    columns: Mapping[str, str] = field(default_factory=dict)  # column name -> what it holds, in card order
    task_categories: tuple[str, ...] = EDIT_RATING_TASK_CATEGORIES
    tags: tuple[str, ...] = ()


# Every card ends with its citation (Jinja drops a template's last newline, hence the blank line).
_CITATION_SECTION = """
## Citation

```bibtex
{{ citation }}
```

"""


def column_table(columns: Mapping[str, str]) -> str:
    """The card's table of columns: name (as code) and description."""
    return md_table(["column", "description"], [[f"`{name}`", text] for name, text in columns.items()])


def size_category(n: int) -> str:
    """The Hub's ``size_categories`` label for ``n`` rows."""
    for bound, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < bound:
            return label
    return "1M<n<10M"


def _feature_yaml(feature: Mapping[str, Any]) -> dict:
    """One feature of ``Features.to_dict()`` in the card's YAML form (the kinds the builders use)."""
    kind = feature["_type"]
    if kind == "Value":
        return {"dtype": feature["dtype"]}
    if kind == "Image" and not feature.get("mode") and feature.get("decode", True):
        return {"dtype": "image"}
    if kind == "ClassLabel":  # the card wants string keys: names {'0': first, '1': second, ...}
        return {"dtype": {"class_label": {"names": {str(i): name for i, name in enumerate(feature["names"])}}}}
    if kind == "List" and feature.get("length", -1) == -1:
        inner = _feature_yaml(feature["feature"])
        return {"list": inner["dtype"] if isinstance(inner.get("dtype"), str) and len(inner) == 1 else inner}
    raise ValueError(f"no card form for feature {feature!r}; extend _feature_yaml")


def features_yaml(features) -> list[dict]:
    """``datasets.Features`` -> the ``dataset_info.features`` list of a dataset card."""
    return [{"name": name, **_feature_yaml(feature)} for name, feature in features.to_dict().items()]


def dataset_card_data(
    *,
    features,
    splits: Mapping[str, Mapping[str, Any]],
    license: str | None,
    pretty_name: str,
    task_categories: Sequence[str] = (),
    tags: Sequence[str] = (),
    language: Sequence[str] = ("en",),
    config_name: str = "default",
):
    """The card metadata of a one-config dataset.

    ``splits`` maps each split to ``{"num_examples", "num_bytes", "file_bytes", "pattern"}``. Only splits
    with rows are listed (a ``data_files`` pattern matching no file is an error at load time), and each
    carries ``num_examples`` **and** ``num_bytes`` (``datasets`` ignores split entries without ``num_bytes``).
    """
    from huggingface_hub import DatasetCardData

    splits = {name: info for name, info in splits.items() if info["num_examples"] > 0}
    n_rows = sum(int(info["num_examples"]) for info in splits.values())
    return DatasetCardData(
        license=license or None,
        pretty_name=pretty_name,
        language=list(language) or None,
        task_categories=list(task_categories) or None,
        tags=list(tags) or None,
        size_categories=[size_category(n_rows)],
        configs=[{
            "config_name": config_name,
            "default": True,
            "data_files": [{"split": name, "path": info["pattern"]} for name, info in splits.items()],
        }],
        dataset_info=[{
            "config_name": config_name,
            "features": features_yaml(features),
            "splits": [{"name": name, "num_bytes": int(info["num_bytes"]), "num_examples": int(info["num_examples"])}
                       for name, info in splits.items()],
            "download_size": int(sum(info.get("file_bytes", 0) for info in splits.values())),
            "dataset_size": int(sum(info["num_bytes"] for info in splits.values())),
        }],
    )


def write_dataset_card(out_dir: Path, card_data, spec: CardSpec, **context) -> Path:
    """Render ``spec.template`` (Jinja; ``{{ card_data }}`` is the YAML metadata) with ``context`` and the
    column table, then the citation, into ``out_dir/README.md``.

    Deterministic: no timestamps, and the same metadata gives the same YAML.
    """
    from huggingface_hub import DatasetCard

    card = DatasetCard.from_template(card_data, template_str=spec.template.rstrip("\n") + "\n" + _CITATION_SECTION,
                                     citation=spec.citation, column_table=column_table(spec.columns), **context)
    path = out_dir / "README.md"
    card.save(path)
    return path
