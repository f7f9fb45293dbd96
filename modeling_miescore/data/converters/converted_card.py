"""The dataset card of a converted benchmark: one Jinja template for all, filled from its :class:`BenchmarkSpec`.

The card metadata carries two ``configs`` (``pointwise`` and/or ``pairwise``, each with a ``test`` split) and a
``miescore_benchmark`` block (name, dimension mapping, tie rule, format source) that ``miescore benchmark
zero-shot`` / ``reward`` read to pick the benchmark's protocol.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..builders.output_folder import (
    EDIT_RATING_TASK_CATEGORIES,
    CardSpec,
    dataset_card_data,
    md_table,
)
from .schema import SPLIT, BenchmarkSpec

__all__ = ["CONVERTED_CARD_TEMPLATE", "card_context", "card_spec", "converted_card_data", "read_benchmark_metadata"]

CONVERTED_CARD_TEMPLATE = """---
{{ card_data }}
---

# {{ title }} (converted for miescore)

{{ title }} converted from its public release into the common single-source edit schema of \
`modeling_miescore.data.converters` by `miescore convert-benchmark {{ name }}`. Reported in: {{ paper_reference }}.

## Configs

{{ configs_table }}

```python
from datasets import load_dataset

{% for config in configs %}{{ config }} = load_dataset("{{ repo_id }}", "{{ config }}", split="test")
{% endfor %}```

## Source format

- Release format read from: {{ format_source }}
- {{ format_note }}
{% if release_part %}- Part of the release converted: {{ release_part }}
{% endif %}
{% if "editing" in configs %}## Judge protocol

An editor benchmark: an editor answers each row with an edited image, which a judge scores \
(`miescore benchmark {{ editor_command }}`). Score dimensions: {{ dimension_names }}.

{{ tie_rule }}
{% else %}## Dimensions

{{ dimensions_table }}

Human scores are kept on the benchmark's own scale in the `human_<dimension>` columns (null where the benchmark has \
no such dimension).

## Ties

{{ tie_rule }}
{% endif %}{% if warnings %}
## Warnings

{% for w in warnings %}- {{ w }}
{% endfor %}{% endif %}
## License

{{ license }} (the original release's terms apply).
"""


_ROW_MEANING = {"pointwise": "one edited image with human scores", "pairwise": "two edits with a human preference",
                "editing": "one editing input (sources + instruction) for an editor to answer; no edited image, "
                           "no human labels"}


def card_spec(spec: BenchmarkSpec) -> CardSpec:
    return CardSpec(CONVERTED_CARD_TEMPLATE, pretty_name=f"{spec.title} (miescore)", citation=spec.citation,
                    repo_placeholder=f"your-name/{spec.name}", task_categories=EDIT_RATING_TASK_CATEGORIES,
                    tags=("image-editing", "reward-model", "benchmark", "miescore-converted"))


def converted_card_data(spec: BenchmarkSpec, features: dict, split_info: dict[str, dict], license: str | None):
    """Card metadata with one config per written kind (the first is the default) and the benchmark block."""
    card = card_spec(spec)
    card_data = None
    for index, (config, info) in enumerate(split_info.items()):
        one = dataset_card_data(features=features[config], splits={SPLIT: info}, license=license,
                                pretty_name=card.pretty_name, task_categories=card.task_categories, tags=card.tags,
                                config_name=config)
        one.configs[0]["default"] = index == 0
        if card_data is None:
            card_data = one
        else:
            card_data.configs += one.configs
            card_data.dataset_info += one.dataset_info
    card_data.miescore_benchmark = spec.to_metadata()
    return card_data


def card_context(spec: BenchmarkSpec, split_info: dict[str, dict]) -> dict[str, Any]:
    configs_table = md_table(["Config", "Rows", "What a row is"], [
        [config, info["num_examples"], _ROW_MEANING[config]] for config, info in split_info.items()])
    dimensions_table = md_table(["Benchmark dimension", "MIEScore score key"], sorted(spec.dimensions.items()))
    return {"title": spec.title, "name": spec.name, "paper_reference": spec.paper_reference,
            "configs": list(split_info), "configs_table": configs_table, "format_source": spec.format_source,
            "format_note": spec.format_note, "dimensions_table": dimensions_table, "tie_rule": spec.tie_rule,
            "dimension_names": ", ".join(spec.dimensions), "editor_command": spec.editor.name if spec.editor else ""}


def read_benchmark_metadata(dataset: str) -> dict | None:
    """The ``miescore_benchmark`` block of a converted dataset's card (local folder or Hub repo), or None."""
    from huggingface_hub import DatasetCard

    path = Path(dataset).expanduser()
    try:
        card = DatasetCard.load(path / "README.md" if path.is_dir() else dataset)
    except Exception:  # noqa: BLE001 - no card, unreachable repo: the caller reports "not a converted benchmark"
        return None
    block = card.data.to_dict().get("miescore_benchmark")
    return block if isinstance(block, dict) else None
