"""The model card (``README.md``) of an adapter trained by the editor-RL trainer, as diffusers' training scripts
write theirs (``examples/dreambooth/train_dreambooth_lora_flux2_klein_img2img.py`` ``save_model_card`` @ diffusers
292e9c4: ``license``, ``base_model``, ``tags``, a sample image, a "Use it with diffusers" block), without a widget.

- **Metadata**: ``base_model`` (the Hub id: ``base_model_id``, or ``model_name_or_path`` when it is one; a local
  path never goes into the metadata) with ``base_model_relation: adapter``; ``license: other`` (the adapter
  follows its base model's license, said in the body); ``library_name: diffusers``; ``pipeline_tag:
  image-to-image``; tags.
- **Image**: the run's last sample grid (``samples/step-N.png``, relative to the card, so it shows on the Hub and
  in a local viewer).
- **Usage**: a complete script that runs as written (tested on the tiny run): the stock pipeline class (for a
  diffusers editor) loaded in the run's dtype (``dtype=``: diffusers 0.42's spelling; ``torch_dtype`` is
  deprecated there), the LoRA, the run's example sources (saved beside the card as ``samples/example-*.png``,
  read with ``transformers.utils.cached_file``, which takes a folder or a Hub id) and the pipeline call the
  trainer makes (the adapter's own keyword arguments: size, guidance, T, extra call arguments). ``ADAPTER`` is the
  Hub repo once pushed, else the run folder; ``BASE`` the base's Hub id, else its local folder (marked to replace
  before pushing). An editor outside diffusers gets the same through ``load_editor``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from ...utils.atomic_files import write_text_atomic
from ...utils.markdown_table import markdown_table

__all__ = ["CARD_SETTINGS", "EXAMPLE_SOURCE", "write_adapter_card"]

EXAMPLE_SOURCE = "samples/example-source-{k}.png"
# the settings the card's table lists
CARD_SETTINGS = ("editor", "reward", "num_generations", "num_inference_steps", "noise_level", "sde_type",
                 "train_steps", "train_fraction", "cfg_scale", "cfg_fraction", "clip_range_low", "clip_range_high",
                 "advantage_clip", "std_level", "beta", "kl_keep_dt", "learning_rate", "lora_rank", "lora_alpha",
                 "per_device_batch_size", "rollout_batches_per_step", "updates_per_step", "step_weighting",
                 "max_steps", "ema_decay", "seed")
_LOCAL = "  # a folder on the machine that trained: replace it by the Hub repo id before pushing"


class _Name:
    """A name in the rendered call (``sources``, ``generator``) in place of a value."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _rendered(value, sources: list) -> str:
    if isinstance(value, list) and value and all(isinstance(v, _Name) for v in value) and value == sources:
        return "sources"
    if isinstance(value, _Name):
        return value.text
    return repr(value)


def _call_lines(editor, instruction: str, num_steps: int, count: int) -> list:
    """``edited = pipe(...)`` with the keyword arguments ``editor`` passes its pipeline (one image)."""
    sources = [_Name(f"sources[{k}]") for k in range(count)]
    kwargs = editor.pipeline_kwargs(sources, instruction, num_images=1, num_steps=num_steps,
                                    generator=_Name("generator"))
    body = [f"    {key}={_rendered(value, sources)}," for key, value in kwargs.items()]
    return ["edited = pipe(", *body, ").images[0]"]


def _usage(config, editor, *, adapter: str, base: str, local: Sequence[str], instruction: str, count: int,
           dtype: str) -> list:
    head = ["import torch", "from PIL import Image", "from transformers.utils import cached_file", ""]
    names = [f"ADAPTER = {json.dumps(adapter)}" + (_LOCAL if "ADAPTER" in local else ""),
             f"BASE = {json.dumps(base)}" + (_LOCAL if "BASE" in local else ""),
             'device = "cuda" if torch.cuda.is_available() else "cpu"', "",
             f"sources = [Image.open(cached_file(ADAPTER, {json.dumps(EXAMPLE_SOURCE)}.format(k=k))).convert(\"RGB\")",
             f"           for k in range({count})]  # the run's example request; use your own images",
             "generator = torch.Generator(\"cpu\").manual_seed(0)"]
    pipeline_class = getattr(editor, "pipeline_class", "")
    if pipeline_class:
        load = [f"from diffusers import {pipeline_class}", *head, *names, *editor.card_setup_lines(), "",
                f"pipe = {pipeline_class}.from_pretrained(BASE, dtype=torch.{dtype}).to(device)",
                "pipe.load_lora_weights(ADAPTER)  # pytorch_lora_weights.safetensors",
                *_call_lines(editor, instruction, config.num_inference_steps, count)]
    else:  # an editor outside diffusers: the adapter the run trained with
        options = json.dumps(config.public_dict()["editor_options"] or {})
        load = ["from modeling_miescore.training.editor_rl.editors import load_editor", *head, *names, "",
                f"editor = load_editor({json.dumps(config.editor)}, BASE, dtype=torch.{dtype}, device=device,",
                f"                     options={options})",
                "editor.load_lora(ADAPTER)",
                f"edited = editor(sources, {json.dumps(instruction)}, num_images=1, "
                f"num_steps={config.num_inference_steps}, generator=generator)[0]"]
    return ["```python", *load, 'edited.save("edited.png")', "```"]


def _metadata(config, base_id: Optional[str]) -> str:
    from huggingface_hub import ModelCardData

    tags = ["diffusers", "diffusers-training", "lora", "image-editing", "flow-grpo", "reinforcement-learning",
            "miescore", config.editor if ":" not in config.editor else "custom-editor"]
    extra = {"base_model_relation": "adapter"} if base_id else {}
    return ModelCardData(license="other", library_name="diffusers", pipeline_tag="image-to-image",
                         base_model=base_id, tags=tags, **extra).to_yaml()


def write_adapter_card(directory, *, config, editor, metrics: Sequence[dict], lora: Optional[dict] = None,
                       example: Optional[tuple] = None, grid: Optional[str] = None,
                       repo_id: Optional[str] = None) -> Path:
    """``directory/README.md`` for the adapter trained by ``config`` (a :class:`~.config.FlowGRPOConfig`) with
    ``editor`` (its :class:`~.editors.EditorAdapter`). ``example``: ``(sources, instruction)`` the usage block
    edits (the sources are saved beside the card); ``grid``: the sample grid's path relative to ``directory``;
    ``repo_id``: the Hub repository the card is pushed to (None: the card names the run folder). A card is meant
    to be pushed, so every setting is shown without credentials (:meth:`~.config.FlowGRPOConfig.public_dict`)."""
    from ...model_card import BASE_PLACEHOLDER, hub_repo_id
    from ...scoring.loading import model_reference
    from ...utils.atomic_files import atomic_write

    out = Path(directory)
    base_id = config.base_model_id or hub_repo_id(config.model_name_or_path)
    adapter = repo_id or str(out.resolve())
    base = base_id or (BASE_PLACEHOLDER if repo_id else model_reference(config.model_name_or_path))
    local = [n for n, v in (("ADAPTER", adapter), ("BASE", base)) if Path(v).is_absolute()]
    sources, instruction = example or ((), "")
    for k, image in enumerate(sources):
        with atomic_write(out / EXAMPLE_SOURCE.format(k=k), "wb") as handle:
            image.convert("RGB").save(handle, format="PNG")
    dtype = "bfloat16" if config.dtype == "auto" else config.dtype
    shown_config = config.public_dict()
    settings = [[f"`{k}`", f"`{shown_config[k]}`"] for k in CARD_SETTINGS]
    if lora:
        settings.append(["LoRA targets", f"`{', '.join(lora.get('target_modules', []))}`"])
    if metrics:
        first, last = metrics[0], metrics[-1]
        shown = lambda value: "none" if value is None else f"{value:.4f}"  # noqa: E731 - null: no valid reward
        run = (f"{len(metrics)} steps logged (`metrics.jsonl`). Mean reward at step {first['step']}: "
               f"{shown(first['reward_mean'])}; at step {last['step']}: {shown(last['reward_mean'])}.")
    else:
        run = "No steps logged."
    name = base_id or Path(config.model_name_or_path).name
    pipeline = getattr(editor, "pipeline_class", "") or config.editor
    lines = [f"# Flow-GRPO LoRA for {name}", ""]
    if grid:
        lines += [f"![Sample grid: each row a request's sources, then its edits and their rewards]({grid})", ""]
    lines += [f"A LoRA adapter for `{base}` ({pipeline}) trained with online RL (Flow-GRPO; Liu et al. 2025, arXiv "
              f"2505.05470) by `trainers/flow_grpo_editor.py` of the `miescore` package, rewarded by "
              f"`{shown_config['reward']}`, following the SpatialReward paper's setting (arXiv 2602.07458, sec. "
              "5.3, appendix B.2).", "", "## Use it", "",
              *_usage(config, editor, adapter=adapter, base=base, local=local, instruction=instruction,
                      count=len(sources), dtype=dtype), ""]
    if local:
        lines += [f"{' and '.join(f'`{n}`' for n in local)} point at folders of the machine that trained, so the "
                  "code runs as written there; `--push_to_hub` writes the Hub ids instead.", ""]
    fetch = [f"hf download {repo_id} --local-dir {Path(repo_id).name}"] if repo_id else []
    lines += ["With the command line (the run's editor options, T and CFG are read from `run.json`):", "",
              "```bash", *fetch, f"miescore edit --lora {Path(repo_id).name if repo_id else adapter} "
              "--input rows.jsonl --out edits/", "```", "",
              "## Training", "", markdown_table(["setting", "value"], settings), "", "## Run", "", run, "",
              "## License", "", f"The adapter follows the license of its base model `{base}`; read it on that "
              "model's card before use.", ""]
    return write_text_atomic(out / "README.md", f"---\n{_metadata(config, base_id)}\n---\n\n" + "\n".join(lines))
