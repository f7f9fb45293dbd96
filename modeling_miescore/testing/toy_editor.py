"""A toy image editor that is **not** a diffusers pipeline, with its adapter: the worked example of the editor
protocol of :mod:`modeling_miescore.training.editor_rl.editors` (how OmniGen2 or any editor from its own
repository plugs into the trainer and ``miescore edit``).

Its latents are the image at ``latent_size`` px; its transformer is a per-token MLP on the timestep, the
instruction's characters and the sources' mean colour; each step makes one ``transformer(**kwargs)`` call per CFG
branch (conditional first), then ``scheduler.step(velocity, t, latents)``.

``--pipeline modeling_miescore.testing.toy_editor:load_toy_editor --model DIR`` with a folder written by
:func:`build_toy_editor`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, Sequence

import numpy as np
import torch
from torch import nn

from ..training.editor_rl.editors import EditorAdapter, EditorSpecError
from ..utils.random_draws import randn_tensor

__all__ = ["ToyEditor", "ToyEditorAdapter", "ToyEditTransformer", "build_toy_editor", "load_toy_editor"]

_EMBED = 32


def _embed_text(text: str, batch: int) -> torch.Tensor:
    """(batch, 1, 32): normalised character counts of ``text`` (0 for the empty instruction)."""
    counts = torch.zeros(_EMBED)
    for ch in text.lower():
        counts[ord(ch) % _EMBED] += 1
    if counts.sum() > 0:
        counts = counts / counts.sum()
    return counts.view(1, 1, _EMBED).expand(batch, 1, _EMBED).clone()


class ToyEditTransformer(nn.Module):
    """Velocity ``(B, N, 3)`` from ``hidden_states`` ``(B, N + N_src, 3)`` (noisy tokens, then source tokens),
    ``timestep`` ``(B,)`` in [0, 1] and ``encoder_hidden_states`` ``(B, 1, 32)``."""

    def __init__(self, hidden: int = 32):
        super().__init__()
        self.to_in = nn.Linear(3 + 3 + _EMBED + 1, hidden)
        self.to_hidden = nn.Linear(hidden, hidden)
        self.to_out = nn.Linear(hidden, 3)

    def forward(self, *, hidden_states, timestep, encoder_hidden_states, num_tokens: int, return_dict: bool = False):
        x = hidden_states[:, :num_tokens]
        source = hidden_states[:, num_tokens:].mean(dim=1, keepdim=True).expand_as(x)
        text = encoder_hidden_states.expand(-1, num_tokens, -1)
        t = timestep.view(-1, 1, 1).expand(-1, num_tokens, 1).to(x.dtype)
        h = torch.nn.functional.silu(self.to_in(torch.cat([x, source, text, t], dim=-1)))
        h = torch.nn.functional.silu(self.to_hidden(h))
        return (self.to_out(h),)


class ToyEditor:
    """The toy editor's sampling loop (module docstring). Images are 3 x ``latent_size``^2 in [-1, 1]."""

    def __init__(self, transformer: ToyEditTransformer, latent_size: int = 16):
        from diffusers import FlowMatchEulerDiscreteScheduler

        self.transformer = transformer
        self.scheduler = FlowMatchEulerDiscreteScheduler(shift=1.0)
        self.latent_size = latent_size

    def _encode(self, image) -> torch.Tensor:
        small = image.convert("RGB").resize((self.latent_size, self.latent_size))
        array = torch.from_numpy(np.asarray(small, dtype=np.float32) / 127.5 - 1.0)
        return array.view(1, -1, 3)

    def _decode(self, latents: torch.Tensor) -> list:
        from PIL import Image

        side = self.latent_size
        arrays = ((latents.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).cpu().numpy()
        return [Image.fromarray(a.reshape(side, side, 3)).resize((2 * side, 2 * side)) for a in arrays]

    @torch.no_grad()
    def __call__(self, *, sources: Sequence, prompt: str, num_images: int, num_inference_steps: int,
                 generator: torch.Generator, guidance_scale: float = 1.0, output_type: str = "pil"):
        weight = next(self.transformer.parameters())
        device, dtype = weight.device, weight.dtype  # every input in the model's device and dtype (bf16 too)
        source = torch.cat([self._encode(s) for s in sources], dim=1).to(device, dtype).expand(num_images, -1, -1)
        n = self.latent_size ** 2
        # one generator, or one per image (diffusers' convention): drawn on the generator's device, then moved
        latents = randn_tensor((num_images, n, 3), generator=generator, device=device, dtype=dtype)
        self.scheduler.set_timesteps(num_inference_steps, device=device)
        self.scheduler.set_begin_index(0)
        cond = _embed_text(prompt, num_images).to(device, dtype)
        uncond = _embed_text("", num_images).to(device, dtype)
        for t in self.scheduler.timesteps:
            hidden = torch.cat([latents, source], dim=1)
            timestep = (t / 1000).expand(num_images)
            velocity = self.transformer(hidden_states=hidden, timestep=timestep, encoder_hidden_states=cond,
                                        num_tokens=n, return_dict=False)[0]
            if guidance_scale > 1:
                negative = self.transformer(hidden_states=hidden, timestep=timestep, encoder_hidden_states=uncond,
                                            num_tokens=n, return_dict=False)[0]
                velocity = negative + guidance_scale * (velocity - negative)
            latents = self.scheduler.step(velocity, t, latents, return_dict=False)[0]
        images = latents if output_type == "latent" else self._decode(latents)
        return type("ToyEditOutput", (), {"images": images})()


class ToyEditorAdapter(EditorAdapter):
    """The adapter of :class:`ToyEditor`: its call, its CFG (``u + w (c - u)``, the default combine), the
    per-sample inputs and the LoRA targets."""

    name: ClassVar[str] = "toy-editor"
    batched_kwargs: ClassVar[tuple] = ("hidden_states", "timestep", "encoder_hidden_states")
    lora_targets: ClassVar[tuple] = ("to_in", "to_hidden", "to_out")
    default_cfg_scale: ClassVar[float] = 2.0

    def pipeline_kwargs(self, sources, instruction, *, num_images, num_steps, generator, guided=True):
        return dict(sources=list(sources), prompt=instruction, num_images=num_images, num_inference_steps=num_steps,
                    generator=generator, guidance_scale=self.cfg_scale if guided else 1.0, **self.call_kwargs)


def build_toy_editor(path, seed: int = 0, latent_size: int = 16) -> Path:
    """Write a toy editor folder (``transformer.safetensors`` + ``toy_editor.json``)."""
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file(ToyEditTransformer().state_dict(), str(path / "transformer.safetensors"))
    (path / "toy_editor.json").write_text(json.dumps({"latent_size": latent_size}))
    return path


def load_toy_editor(model, *, dtype=torch.float32, device="cpu", **options) -> ToyEditorAdapter:
    """The editor factory for ``--pipeline modeling_miescore.testing.toy_editor:load_toy_editor``."""
    from safetensors.torch import load_file

    folder = Path(model)
    if not (folder / "toy_editor.json").is_file():
        raise EditorSpecError(f"model {model!r} is not a toy editor folder (no toy_editor.json)")
    transformer = ToyEditTransformer()
    transformer.load_state_dict(load_file(str(folder / "transformer.safetensors")))
    settings = json.loads((folder / "toy_editor.json").read_text())
    editor = ToyEditor(transformer.to(device=device, dtype=dtype), latent_size=int(settings["latent_size"]))
    unknown = set(options) - set(ToyEditorAdapter.options)
    if unknown:
        raise EditorSpecError(f"toy editor has no option(s) {', '.join(sorted(unknown))}")
    return ToyEditorAdapter(editor, model_id=str(model), **options)
