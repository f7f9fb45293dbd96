"""The trained adapter's publication: its model card, ``--push_to_hub``, and :class:`TrainerOutputs` (a mixin of
:class:`~.trainer.FlowGRPOEditorTrainer`: the sample grids, checkpoints, the adapter with its card, the push).

**The card** (``README.md``), as diffusers' training scripts write theirs
(``examples/dreambooth/train_dreambooth_lora_flux2_klein_img2img.py`` ``save_model_card`` @ diffusers 292e9c4),
without a widget:

- **Metadata**: ``base_model`` (the Hub id: ``base_model_id``, or ``model_name_or_path`` when it is one; a local
  path never goes into the metadata) with ``base_model_relation: adapter``; ``license: other`` (the adapter
  follows its base model's license, said in the body); ``library_name: diffusers``; ``pipeline_tag:
  image-to-image``; tags.
- **Image**: the run's last sample grid (``samples/step-N.png``, relative to the card).
- **Usage**: a complete script that runs as written (tested on the tiny run): the stock pipeline class loaded in
  the run's dtype (``dtype=``: diffusers 0.42's spelling), the LoRA, the run's example sources (saved beside the
  card as ``samples/example-*.png``, read with ``transformers.utils.cached_file``) and the pipeline call the
  trainer makes. ``ADAPTER`` is the Hub repo once pushed, else the run folder; ``BASE`` the base's Hub id, else
  its local folder (marked to replace before pushing). An editor outside diffusers gets the same through
  ``load_editor``.

**The push**: the adapter, its card, ``run.json``, ``metrics.jsonl`` and the sample grids go to a Hub model
repository in one commit (``upload_folder``); checkpoints and rollouts stay local. It is checked before training
starts (:func:`modeling_miescore.data.builders.output_folder.check_hub_push`): a push that cannot work is one error and
exit status 2 before anything is trained. The repository defaults to ``output_dir``'s folder name in the token's
namespace (``hub_model_id`` names another). An upload that fails after training raises
:class:`~modeling_miescore.data.builders.output_folder.HubPushError` (the run's folder is complete; exit status 1).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional, Sequence

import torch

from ...hub.errors import MIEScoreInputError
from ...utils.atomic_files import write_text_atomic
from ...utils.markdown_table import markdown_table
from .checkpoints import run_writes, save_checkpoint
from .objective import TrainingDivergedError
from .outputs import GridRow, log_grid_image, save_png, save_sample_grid
from .policy import lora_metadata, lora_state_dict, non_finite_tensors, save_full_transformer
from .schedule import derived_seed
from ...hub.model_card import BASE_PLACEHOLDER, hub_repo_id
from ...scoring.loading import model_reference
from ...data.builders.output_folder import HubPushUnavailableError, check_hub_push, push_folder_to_hub
from .rollout import sample_request

__all__ = ["CARD_SETTINGS", "EXAMPLE_SOURCE", "write_adapter_card", "PUSHED_FILES", "check_run_push", "push_run",
           "TrainerOutputs"]

# the trainer's log: the mixin below logs as the trainer
logger = logging.getLogger(__name__.rsplit(".", 1)[0] + ".trainer")


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
                       repo_id: Optional[str] = None, sections: Sequence[str] = ()) -> Path:
    """``directory/README.md`` for the adapter trained by ``config`` (a :class:`~.config.FlowGRPOConfig`) with
    ``editor`` (its :class:`~.editors.EditorAdapter`). ``example``: ``(sources, instruction)`` the usage block
    edits (the sources are saved beside the card); ``grid``: the sample grid's path relative to ``directory``;
    ``repo_id``: the Hub repository the card is pushed to (None: the card names the run folder); ``sections``:
    Markdown lines placed before the license (the evaluation, :mod:`.evaluation`). A card is meant
    to be pushed, so every setting is shown without credentials (:meth:`~.config.FlowGRPOConfig.public_dict`)."""
    out = Path(directory)
    base_id = config.base_model_id or hub_repo_id(config.model_name_or_path)
    adapter = repo_id or str(out.resolve())
    base = base_id or (BASE_PLACEHOLDER if repo_id else model_reference(config.model_name_or_path))
    local = [n for n, v in (("ADAPTER", adapter), ("BASE", base)) if Path(v).is_absolute()]
    sources, instruction = example or ((), "")
    for k, image in enumerate(sources):
        save_png(out / EXAMPLE_SOURCE.format(k=k), image.convert("RGB"))
    dtype = "bfloat16" if config.dtype == "auto" else config.dtype
    shown_config = config.public_dict()
    settings = [[f"`{k}`", f"`{shown_config[k]}`"] for k in CARD_SETTINGS]
    if lora:
        settings.append(["LoRA targets", f"`{', '.join(lora.get('target_modules', []))}`"])
    metrics = [m for m in metrics if "reward_mean" in m]  # the training steps' rows (not the evals')
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
              *sections,
              "## License", "", f"The adapter follows the license of its base model `{base}`; read it on that "
              "model's card before use.", ""]
    return write_text_atomic(out / "README.md", f"---\n{_metadata(config, base_id)}\n---\n\n" + "\n".join(lines))


# what goes to the Hub (upload_folder allow_patterns): the adapter (or the full transformer), card, record, logs
PUSHED_FILES = ["pytorch_lora_weights.safetensors", "README.md", "run.json", "metrics.jsonl", "samples/*",
                "eval_curves.png", "evals.jsonl",
                "transformer/*", "transformer.safetensors"]


def check_run_push(config) -> str:
    """The full repository id (``namespace/name``) the run will push to; :class:`MIEScoreInputError` when the
    push cannot work (no token, offline, unreachable Hub, a bad id), before anything is trained."""
    repo_id = config.hub_model_id or Path(config.output_dir).name
    try:
        user = check_hub_push(repo_id)
    except HubPushUnavailableError as error:
        message = str(error).replace("build without push_to_hub", "train without --push_to_hub")
        message = message.replace(f"push_to_hub={repo_id}", f"--push_to_hub (repository {repo_id})")
        raise MIEScoreInputError(message.replace("push_to_hub: invalid", "--push_to_hub: invalid")) from None
    return repo_id if "/" in repo_id or not user else f"{user}/{repo_id}"


def push_run(output_dir, repo_id: str, *, private=None) -> str:
    """Upload the run's :data:`PUSHED_FILES` to ``repo_id`` in one commit; returns the commit URL."""
    return push_folder_to_hub(output_dir, repo_id, private=private, repo_type="model",
                              commit_message="Upload Flow-GRPO adapter (miescore)", allow_patterns=PUSHED_FILES)


class TrainerOutputs:
    """Grids, checkpoints, adapter + card, Hub upload (module docstring)."""

    last_grid: Optional[Path] = None

    def save_grid(self, step: int) -> Optional[Path]:
        """The sample grid of ``step`` (written by the main process; ODE sampling with a fixed seed, guided as
        ``sample_grid_schedule`` says: by default on the steps the rollouts guide), each edit with its reward, and
        logged to the trackers. A sharded transformer samples on every process (its forwards are collectives)."""
        cfg, main = self.config, self.accelerator.is_main_process
        if not self.grid_rows or not (main or self.sharded):
            return None
        if step == 0 and main:
            logger.info("sample grids (samples/step-N.png): %s", self.grid_schedule.describe(cfg.num_inference_steps))
        with torch.no_grad():
            groups = [sample_request(self.editor, row, num_images=cfg.sample_grid_images,
                                     num_steps=cfg.num_inference_steps, schedule=self.grid_schedule,
                                     seed=derived_seed(cfg.seed, "grid", k)) for k, row in enumerate(self.grid_rows)]
        if not main:
            return None
        try:
            scores = self.reward.score_groups(groups)
        except Exception as error:  # noqa: BLE001 - a grid without rewards says why; the run goes on
            logger.warning("the sample grid of step %d has no rewards: %s: %s", step, type(error).__name__, error)
            scores = [None] * len(groups)
        rows = [GridRow(f"{row.id}: {row.instruction}", group.sources, group.edits, score.rewards if score else (),
                        score.failures if score else ("reward unavailable",) * len(group.edits))
                for row, group, score in zip(self.grid_rows, groups, scores)]
        with run_writes(f"the sample grid of step {step}", self.out):
            path = save_sample_grid(self.out / "samples" / f"step-{step:06d}.png", rows, step=step)
        self.last_grid = path
        if self.accelerator.trackers:
            log_grid_image(self.accelerator, path, step)
        return path

    def _checkpoint(self, step: int) -> None:
        acc = self.accelerator
        ema_state = None
        if self.ema is not None:
            ema_state = {"shadow": {n: p.detach().cpu()
                                    for n, p in zip(self._trainable_names(), self.ema.shadow_params)},
                         "step": self.ema.optimization_step}
        optimizer = self.optimizer
        if self.sharded:
            from .policy import full_optimizer_state

            optimizer = full_optimizer_state(self.raw_model, self.optimizer)
        save_checkpoint(self.out, step, trainable=self._trainable_state(), optimizer=optimizer,
                        lr_scheduler=self.lr_scheduler, ema_state=ema_state, rank=acc.process_index,
                        is_main=acc.is_main_process, every=self._from_every_process)

    def save_adapter(self) -> Path:
        """The trained LoRA (EMA weights when enabled) or, with ``finetuning: full``, the transformer (a diffusers
        model folder ``transformer/``), and the card, in ``output_dir``."""
        if self.ema is not None:
            self.ema.store(self.params)
            self.ema.copy_to(self.params)
        try:
            full = None
            if self.sharded:
                from .policy import full_model_state

                full = full_model_state(self.raw_model)  # every process gathers; the main one writes
            if self.accelerator.is_main_process:
                self._write_adapter(full)
        finally:
            if self.ema is not None:
                self.ema.restore(self.params)
        self.accelerator.wait_for_everyone()
        return self.out

    def _write_adapter(self, full) -> None:
        """The main process writes the adapter (or the transformer) and the card."""
        with run_writes("the trained adapter and its card", self.out):
            if self.config.finetuning == "lora":
                state = lora_state_dict(self.raw_model)
                bad = non_finite_tensors(state)
                if bad:  # never written: such an adapter edits black images without a word
                    raise TrainingDivergedError(f"the trained LoRA holds non-finite values (in {len(bad)} tensor(s), "
                                                f"e.g. {bad[0]}); lower learning_rate and resume from a checkpoint")
                self.editor.save_lora(self.out, state, lora_metadata(self.raw_model))
            else:  # the whole transformer (gathered from its shards under FSDP2)
                save_full_transformer(self.raw_model, self.raw_model.state_dict() if full is None else full,
                                      self.out / "transformer")
            self._write_card(repo_id=None)

    def _write_card(self, repo_id: Optional[str]) -> Path:
        example = None
        if self.grid_rows or self.rows:
            row = (self.grid_rows or self.rows)[0]
            example = (row.load_sources(), row.instruction)
        grid = getattr(self, "last_grid", None)
        return write_adapter_card(self.out, config=self.config, editor=self.editor, metrics=self.metrics.read(),
                                  lora=lora_metadata(self.raw_model) if self.config.finetuning == "lora" else None,
                                  example=example, grid=grid.relative_to(self.out).as_posix() if grid else None,
                                  repo_id=repo_id, sections=getattr(self, "evaluation_card_lines", list)())

    def push_to_hub(self) -> Optional[str]:
        """Upload the adapter, its card (naming the Hub repository), ``run.json``, ``metrics.jsonl`` and the
        sample grids in one commit (main process); the commit URL."""
        url = None
        if self.accelerator.is_main_process:
            with run_writes("the card of the Hub repository", self.out):
                self._write_card(repo_id=self.hub_repo)
            url = push_run(self.out, self.hub_repo, private=self.config.hub_private_repo)
            logger.info("pushed the adapter to %s", url)
        self.accelerator.wait_for_everyone()
        return url
