"""Image editors the trainer and ``miescore edit`` drive: one adapter per editor, declared once in :data:`EDITORS`.

An adapter turns (sources, instruction, G, steps, seed) into the keyword call of its pipeline, and knows what the
pipeline does with its transformer outputs (the CFG combination), which transformer inputs are per-sample
(``batched_kwargs``, sliced for micro-batches) and which modules LoRA targets by default.

**Diffusers editors** (the stock pipeline classes of diffusers >= 0.42):

- ``qwen-image-edit-plus`` (``QwenImageEditPlusPipeline``, several sources; the main target): true CFG
  ``u + w (c - u)`` followed by the pipeline's token-wise norm rescale ``* |c| / |comb|``; one prompt per call.
  ``vae_image_size`` / ``condition_image_size`` replace the module constants ``VAE_IMAGE_SIZE`` (1024^2) and
  ``CONDITION_IMAGE_SIZE`` (384^2) *during this adapter's calls only* (tests use small values; never set them
  for real weights unless you mean to).
- ``flux2-klein`` (``Flux2KleinPipeline``, several references): CFG ``u + w (c - u)`` with the pipeline's empty
  negative prompt, unless the checkpoint is step-distilled.
- ``flux-kontext`` (``FluxKontextPipeline``, one source): guidance-distilled (``call_kwargs.guidance_scale``,
  default 2.5 as flow_grpo's ``counting_flux_kontext``), optional true CFG with a negative prompt.

**Editors outside diffusers** (OmniGen2, the SpatialReward paper's policy, lives in its own repository): write an
:class:`EditorAdapter` subclass and pass ``--pipeline module:function`` where ``function(model, **options)``
returns it. The protocol the trainer relies on:

1. ``adapter.pipeline`` has ``.transformer`` (an ``nn.Module``; LoRA goes there) and ``.scheduler``, a
   ``FlowMatchEulerDiscreteScheduler`` (sigma 1 = noise -> 0 = data, velocity ``eps - x0``); the trainer swaps in
   its subclass. An editor whose time runs the other way (OmniGen2: t 0 = noise -> 1, ``dt > 0``) maps
   ``sigma = 1 - t`` and ``v = -v_own`` in a thin wrapper around its scheduler and model.
2. Its sampling loop calls ``transformer(**kwargs)`` once per CFG branch per step, conditional branch first, with
   ``kwargs["hidden_states"]`` starting with the ``N`` noisy-latent tokens, then ``scheduler.step(velocity, t,
   latents)`` once per step on latents of shape ``(B, N, C)``.
3. The adapter implements :meth:`~EditorAdapter.pipeline_kwargs` (the call) and :meth:`~EditorAdapter.combine`
   (the loop's CFG), and lists ``batched_kwargs`` and ``lora_targets``.

``modeling_miescore.testing.toy_editor`` is a complete example: a small editor that is not a diffusers pipeline,
with its adapter and builder.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Dict, Optional, Sequence, Tuple, Type

import torch
from pydantic import Field

from ...hub.errors import MIEScoreInputError
from ...utils.declared_settings import field_problems
from ...utils.suggestions import suggestion
from ...utils.import_spec import import_callable
from .policy import save_lora_safetensors, load_lora_safetensors, check_lora_file
from ...hub.image_io import open_image, open_image_bytes

__all__ = ["EDITORS", "EditorAdapter", "EditorOptionValues", "EditorSpecError", "DiffusersEditor",
           "editor_option_problems", "load_editor", "register_editor"]


class EditorSpecError(MIEScoreInputError):
    """An editor name, model folder or option that cannot work (what, where, how to fix)."""


EDITORS: Dict[str, Type["DiffusersEditor"]] = {}


def register_editor(cls):
    """Class decorator: declare a :class:`DiffusersEditor` under its ``name`` in :data:`EDITORS`."""
    EDITORS[cls.name] = cls
    return cls


class EditorAdapter:
    """What the trainer needs from an editor (module docstring). Subclasses set the class attributes."""

    name: ClassVar[str] = "editor"
    max_sources: ClassVar[Optional[int]] = None
    batched_kwargs: ClassVar[Tuple[str, ...]] = ("hidden_states", "timestep", "encoder_hidden_states")
    lora_targets: ClassVar[Tuple[str, ...]] = ("to_q", "to_k", "to_v", "to_out.0")
    options: ClassVar[Tuple[str, ...]] = ("height", "width", "cfg_scale", "negative_prompt", "call_kwargs")
    default_cfg_scale: ClassVar[float] = 1.0

    def __init__(self, pipeline, *, height: Optional[int] = None, width: Optional[int] = None,
                 cfg_scale: Optional[float] = None, negative_prompt: Optional[str] = None,
                 call_kwargs: Optional[dict] = None, model_id: str = ""):
        self.pipeline = pipeline
        self.height, self.width = height, width
        self.cfg_scale = self.default_cfg_scale if cfg_scale is None else float(cfg_scale)
        self.negative_prompt = negative_prompt
        self.call_kwargs = dict(call_kwargs or {})
        self.model_id = model_id

    @property
    def transformer(self) -> torch.nn.Module:
        return self.pipeline.transformer

    def check_sources(self, sources: Sequence, where: str) -> None:
        if not sources:
            raise EditorSpecError(f"{where}: no source images; editor {self.name!r} needs at least one")
        if self.max_sources is not None and len(sources) > self.max_sources:
            raise EditorSpecError(f"{where}: {len(sources)} source images, but editor {self.name!r} takes at most "
                                  f"{self.max_sources}; use a multi-source editor (qwen-image-edit-plus, "
                                  "flux2-klein) or drop sources")

    def pipeline_kwargs(self, sources: Sequence, instruction: str, *, num_images: int, num_steps: int,
                        generator: torch.Generator, guided: bool = True) -> dict:
        """Keyword arguments of one pipeline call making ``num_images`` edits of ``sources``. ``guided=False``:
        no classifier-free guidance at any step."""
        raise NotImplementedError

    def combine(self, cond: torch.Tensor, uncond: torch.Tensor) -> torch.Tensor:
        """The velocity the pipeline's loop makes from its conditional and unconditional outputs, (B, N, C)."""
        return uncond + self.cfg_scale * (cond - uncond)

    def call_context(self):
        """A context manager wrapped around every pipeline call (nothing by default)."""
        return contextlib.nullcontext()

    def card_setup_lines(self) -> list:
        """Python lines a plain diffusers script runs before calling the pipeline as this adapter does (what
        :meth:`call_context` sets, for the adapter's model card); none by default."""
        return []

    def __call__(self, sources, instruction, *, num_images, num_steps, generator, guided=True, output_type="pil"):
        """Run the pipeline: ``num_images`` edits (PIL images unless ``output_type`` says otherwise)."""
        kwargs = self.pipeline_kwargs(sources, instruction, num_images=num_images, num_steps=num_steps,
                                      generator=generator, guided=guided)
        with self.call_context():
            return self.pipeline(**kwargs, output_type=output_type).images

    # LoRA files ---------------------------------------------------------------------------------------------
    def save_lora(self, directory, state_dict: dict, metadata: dict) -> None:
        """Write the LoRA ``state_dict`` of the transformer (keys without a ``transformer.`` prefix) to
        ``directory/pytorch_lora_weights.safetensors`` (diffusers' LoRA format)."""
        save_lora_safetensors(directory, state_dict, metadata)

    def load_lora(self, directory) -> None:
        load_lora_safetensors(self.transformer, directory)


class DiffusersEditor(EditorAdapter):
    """An adapter for a stock diffusers pipeline class (``pipeline_class``, a name in ``diffusers``)."""

    pipeline_class: ClassVar[str] = ""

    def save_lora(self, directory, state_dict: dict, metadata: dict) -> None:
        type(self.pipeline).save_lora_weights(directory, transformer_lora_layers=state_dict,
                                              transformer_lora_adapter_metadata=metadata, safe_serialization=True)

    def load_lora(self, directory) -> None:
        """diffusers' ``load_lora_weights`` on an adapter file checked first (:func:`~.policy.check_lora_file`)."""
        check_lora_file(directory)
        self.pipeline.load_lora_weights(str(directory))

    def _size_kwargs(self) -> dict:
        return {k: v for k, v in (("height", self.height), ("width", self.width)) if v is not None}


@register_editor
class QwenImageEditPlusEditor(DiffusersEditor):
    name = "qwen-image-edit-plus"
    pipeline_class = "QwenImageEditPlusPipeline"
    batched_kwargs = ("hidden_states", "timestep", "encoder_hidden_states", "encoder_hidden_states_mask")
    # flow_grpo scripts/train_qwenimage_edit_plus.py: attention projections of both streams and both MLPs
    lora_targets = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
                    "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj", "txt_mlp.net.2")
    options = EditorAdapter.options + ("vae_image_size", "condition_image_size")
    default_cfg_scale = 4.0  # diffusers' default true_cfg_scale; flow_grpo's Qwen-Image-Edit configs use 4

    def __init__(self, pipeline, *, vae_image_size: Optional[int] = None, condition_image_size: Optional[int] = None,
                 **options):
        super().__init__(pipeline, **options)
        self.constants = {k: v for k, v in (("VAE_IMAGE_SIZE", vae_image_size),
                                            ("CONDITION_IMAGE_SIZE", condition_image_size)) if v is not None}
        if self.negative_prompt is None:
            self.negative_prompt = " "  # the pipeline's documented example; true CFG needs a negative prompt

    def pipeline_kwargs(self, sources, instruction, *, num_images, num_steps, generator, guided=True):
        return dict(image=list(sources), prompt=instruction, negative_prompt=self.negative_prompt,
                    true_cfg_scale=self.cfg_scale if guided else 1.0, num_images_per_prompt=num_images,
                    num_inference_steps=num_steps, generator=generator, **self._size_kwargs(), **self.call_kwargs)

    def combine(self, cond, uncond):
        combined = uncond + self.cfg_scale * (cond - uncond)
        return combined * (torch.norm(cond, dim=-1, keepdim=True) / torch.norm(combined, dim=-1, keepdim=True))

    def card_setup_lines(self):
        if not self.constants:
            return []
        return ["import diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus as qwen_edit_plus", "",
                *(f"qwen_edit_plus.{name} = {value!r}  # the run's source sizes (editor_options)"
                  for name, value in self.constants.items())]

    @contextlib.contextmanager
    def call_context(self):
        import diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus as module

        saved = {name: getattr(module, name) for name in self.constants}
        for name, value in self.constants.items():
            setattr(module, name, value)
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(module, name, value)


@register_editor
class Flux2KleinEditor(DiffusersEditor):
    name = "flux2-klein"
    pipeline_class = "Flux2KleinPipeline"
    batched_kwargs = ("hidden_states", "timestep", "encoder_hidden_states", "txt_ids", "img_ids")
    # the double-stream attention of both streams and the single-stream block's fused projection
    lora_targets = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
                    "to_qkv_mlp_proj")
    default_cfg_scale = 4.0  # the pipeline's default guidance_scale

    def check_sources(self, sources, where):
        """Also the pipeline's own rule for its references (``Flux2ImageProcessor.check_image_input``: each side
        at least 64 px, aspect ratio at most 8), from the headers, so a run refuses a request up front instead
        of failing inside a rollout."""
        super().check_sources(sources, where)
        check = getattr(getattr(self.pipeline, "image_processor", None), "check_image_input", None)
        if check is None:
            return

        for k, source in enumerate(sources):
            what = f"{where}: source {k + 1}"
            binary = isinstance(source, (bytes, bytearray))
            image = open_image_bytes(bytes(source), what) if binary else open_image(source)
            try:
                check(image)
            except ValueError as error:
                raise EditorSpecError(f"{what}: {error} ({self.pipeline_class}'s rule for its reference images); "
                                      "use larger sources or another editor") from None

    def pipeline_kwargs(self, sources, instruction, *, num_images, num_steps, generator, guided=True):
        return dict(image=list(sources), prompt=instruction, guidance_scale=self.cfg_scale if guided else 1.0,
                    num_images_per_prompt=num_images, num_inference_steps=num_steps, generator=generator,
                    **self._size_kwargs(), **self.call_kwargs)


@register_editor
class FluxKontextEditor(DiffusersEditor):
    name = "flux-kontext"
    pipeline_class = "FluxKontextPipeline"
    max_sources = 1
    batched_kwargs = ("hidden_states", "timestep", "encoder_hidden_states", "pooled_projections", "guidance")
    lora_targets = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
                    "proj_mlp", "proj_out")
    default_cfg_scale = 1.0  # guidance-distilled: no true CFG unless asked for (then give negative_prompt)

    def pipeline_kwargs(self, sources, instruction, *, num_images, num_steps, generator, guided=True):
        call = {"guidance_scale": 2.5, **self.call_kwargs}  # flow_grpo counting_flux_kontext: 2.5
        true_cfg = self.cfg_scale if guided and self.negative_prompt else 1.0
        return dict(image=sources[0], prompt=instruction, negative_prompt=self.negative_prompt,
                    true_cfg_scale=true_cfg, num_images_per_prompt=num_images, num_inference_steps=num_steps,
                    generator=generator, **self._size_kwargs(), **call)


@dataclass
class EditorOptionValues:
    """What the adapters' options accept (checked before any weights load, :func:`editor_option_problems`)."""

    height: Annotated[Optional[int], Field(ge=1)] = None
    width: Annotated[Optional[int], Field(ge=1)] = None
    cfg_scale: Annotated[Optional[float], Field(gt=0)] = None
    negative_prompt: Optional[str] = None
    call_kwargs: Optional[dict] = None
    vae_image_size: Annotated[Optional[int], Field(ge=1)] = None
    condition_image_size: Annotated[Optional[int], Field(ge=1)] = None


def editor_option_problems(pipeline: str, options: dict) -> list:
    """One phrase per bad entry of ``options`` for the editor ``pipeline`` (a name in :data:`EDITORS`: also an
    unknown option; a ``module:function`` editor: only the options the adapters share are checked)."""
    problems = []
    if pipeline in EDITORS:
        cls = EDITORS[pipeline]
        unknown = sorted(set(options) - set(cls.options))
        if unknown:
            problems.append(f"editor {cls.name!r} has no option(s) {', '.join(unknown)}; its options: "
                            f"{', '.join(cls.options)}{suggestion(unknown[0], cls.options)}")
    known = {k: v for k, v in options.items() if k in EditorOptionValues.__dataclass_fields__}
    return problems + [f"editor_options.{p}" for p in field_problems(EditorOptionValues(**known))]


def _check_options(cls, options: dict) -> None:
    problems = editor_option_problems(cls.name, options)
    if problems:
        raise EditorSpecError("; ".join(problems))


def load_editor(pipeline: str, model: str, *, dtype: torch.dtype = torch.float32, device="cpu",
                options: Optional[dict] = None) -> EditorAdapter:
    """The adapter for ``pipeline`` (a name in :data:`EDITORS`, or ``module:function`` returning an
    :class:`EditorAdapter`) with the weights in ``model`` (a pipeline folder or Hub id), on ``device``."""
    options = dict(options or {})
    if pipeline in EDITORS:
        cls = EDITORS[pipeline]
        _check_options(cls, options)
        import diffusers

        pipeline_cls = getattr(diffusers, cls.pipeline_class, None)
        if pipeline_cls is None:
            raise EditorSpecError(f"editor {pipeline!r} needs diffusers' {cls.pipeline_class} (diffusers >= 0.42); "
                                  f"installed: {diffusers.__version__}")
        _check_model_index(model, cls.pipeline_class, pipeline)
        try:
            pipe = pipeline_cls.from_pretrained(model, dtype=dtype).to(device)
        except (OSError, ValueError) as error:  # not on the Hub / not in the cache offline / not a pipeline
            first = " ".join(str(error).split())[:240] or type(error).__name__
            if not Path(model).expanduser().exists():
                raise EditorSpecError(f"model {model!r} is not a folder here and could not be loaded from the Hub "
                                      f"({first}); check the path or the repo id") from None
            raise EditorSpecError(f"cannot load the {cls.pipeline_class} '{model}' for editor {pipeline!r} ({first}); "
                                  "is it a complete diffusers pipeline folder?") from None
        pipe.set_progress_bar_config(disable=True)
        return cls(pipe, model_id=str(model), **options)
    if ":" in pipeline:
        factory = import_callable(pipeline, "editor factory", error=EditorSpecError)
        try:
            adapter = factory(model, dtype=dtype, device=device, **options)
        except MIEScoreInputError:
            raise
        except Exception as error:  # noqa: BLE001 - a user's factory: its failure is one line naming it
            raise EditorSpecError(f"editor factory {pipeline!r} failed on model '{model}': {type(error).__name__}: "
                                  f"{' '.join(str(error).split())[:240]}") from None
        if not isinstance(adapter, EditorAdapter):
            raise EditorSpecError(f"editor factory {pipeline!r} returned {type(adapter).__name__}, not an "
                                  "EditorAdapter (see modeling_miescore.training.editor_rl.editors)")
        return adapter
    raise EditorSpecError(f"unknown editor {pipeline!r}; use one of {', '.join(EDITORS)} or package.module:function")


def _check_model_index(model: str, expected: str, name: str) -> None:
    import json

    index = Path(model).expanduser() / "model_index.json"
    if not Path(model).expanduser().exists():
        return  # a Hub id: diffusers reports what it cannot load
    if not index.is_file():
        raise EditorSpecError(f"model {model!r} has no model_index.json: not a diffusers pipeline folder")
    found = json.loads(index.read_text()).get("_class_name")
    if found != expected:
        raise EditorSpecError(f"model {model!r} is a {found}, but editor {name!r} needs a {expected}; pick the "
                              f"editor of that pipeline ({', '.join(EDITORS)})")
