"""What the training recipes hand to the model cards (``modeling_miescore.hub.model_card``) and put beside adapters.

* :class:`ModelCardArguments`: ``--base_model_id`` / ``--dataset_id``, the Hub repo ids a card names when the run
  read its model or data from local folders (a card's metadata never holds a local path).
* :func:`card_repo_ids`: the base model and dataset ids of a run (the explicit ids, else the names given when
  they are Hub repo ids, else none); :func:`local_folder`: the base's local folder, which an adapter card's code
  loads when there is no Hub id (with a note to replace it before pushing).
* :func:`save_adapter_extras`: what an adapter folder needs so that the card's recipe (base + ``PeftModel``)
  reproduces the merged checkpoint: the run's config overrides of the base (``base_config_overrides.json``:
  rubric, image budget, ...) and the model code (the class the recipe loads the base with);
  :func:`write_adapter_card`: those and the adapter's card, :func:`write_card`: a folder's card.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..hub.model_card import BASE_CONFIG_OVERRIDES, ModelCardInfo, hub_repo_id, render_model_card
from ..utils.atomic_files import write_text_atomic

__all__ = ["ModelCardArguments", "card_repo_ids", "local_folder", "save_adapter_extras", "training_settings",
           "write_adapter_card", "write_card"]


@dataclass
class ModelCardArguments:
    base_model_id: str | None = field(default=None, metadata={
        "help": "Hub repo id of the base model, for the model card, when the model is read from a local folder."})
    dataset_id: str | None = field(default=None, metadata={
        "help": "Hub repo id of the training data, for the model card, when the data is read from a local folder."})


def card_repo_ids(args: ModelCardArguments, model_name_or_path: str | None,
                  dataset: str | None) -> tuple[str | None, list[str]]:
    """``(base model id or None, [dataset id] or [])`` for a run's card; explicit ids must be repo ids."""
    for name in ("base_model_id", "dataset_id"):
        value = getattr(args, name)
        if value and hub_repo_id(value) is None:
            raise ValueError(f"--{name} {value!r} is not a Hub repo id ('org/name'); it names the model card's "
                             "metadata, which never holds a local path")
    base = args.base_model_id or hub_repo_id(model_name_or_path)
    data = args.dataset_id or hub_repo_id(dataset)
    return base, [data] if data else []


def local_folder(name: str | os.PathLike | None) -> str | None:
    """The absolute path of ``name`` when it is a local folder (a run's base read from disk), else None."""
    return os.path.abspath(name) if name and os.path.isdir(name) else None


def training_settings(training_args, names: Sequence[str]) -> dict[str, Any]:
    """The named fields of a ``TrainingArguments`` (or TRL config), with enum values as their names."""
    return {name: getattr(getattr(training_args, name), "value", getattr(training_args, name)) for name in names}


def save_adapter_extras(folder: str | os.PathLike, model_class: type, overrides: Mapping[str, Any]) -> None:
    """Write ``base_config_overrides.json`` (the run's settings applied to the base's config) and copy the Hub
    code of ``model_class`` (its module and every sibling it imports) into an adapter folder."""
    from transformers.dynamic_module_utils import custom_object_save

    write_text_atomic(Path(folder) / BASE_CONFIG_OVERRIDES, json.dumps(dict(overrides), indent=2) + "\n")
    custom_object_save(model_class, folder)


def write_card(folder: str | os.PathLike, kind: str, card: ModelCardInfo, adapter: bool = False) -> Path:
    """``folder/README.md``: the ``kind`` model card of ``card`` (``hub.model_card.render_model_card``)."""
    return write_text_atomic(Path(folder) / "README.md", render_model_card(kind, card, adapter=adapter))


def write_adapter_card(folder: str | os.PathLike, kind: str, card: ModelCardInfo, model_class: type,
                       overrides: Mapping[str, Any], copy_code: bool = True, **changes) -> Path:
    """An adapter folder's card and (``copy_code``) :func:`save_adapter_extras`; without a Hub id for the base the
    card's code loads this folder (``adapter_folder``). ``changes``: other fields of the adapter's card."""
    if copy_code:
        save_adapter_extras(folder, model_class, overrides)
    card = dataclasses.replace(card, adapter_base=card.base_model, adapter_folder=os.path.abspath(folder), **changes)
    return write_card(folder, kind, card, adapter=True)
