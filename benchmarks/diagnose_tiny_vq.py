"""Why the tiny MIEScore learns IF/AP but not VQ on the fixture: what its vision tower can and cannot see.

The fixture's VQ faults (blur, JPEG, noise) change high-frequency energy; blur lowers it and noise raises it, and
image content varies it more than either. This script measures, on held-out instances of the 40-instance fixture
(split 75/25 by instance, target: the planted latent VQ), how well a ridge regression recovers VQ from
  1. pixel difference energies (log mean squared horizontal/vertical differences, log patch variance), linear
     and with squares and a cross term: the signal is there, but only non-linearly;
  2. the frozen, randomly initialised tiny Qwen3-VL vision tower (mean-pooled merger output, 3 seeds);
  3. the same frozen tower, edited image minus source image 1 token by token (the background is the same scene,
     so this cancels most content);
and 4. the tower trained directly on VQ (vision tower + linear head, AdamW 3e-4, batch 16): the most the
tiny tower can learn about VQ from the fixture's training edits without any language model in the way.

    python benchmarks/diagnose_tiny_vq.py [--steps 400] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from PIL import Image

from modeling_miescore.evaluation.metrics.correlation import srcc
from modeling_miescore.testing import build_tiny_processor, make_raw_mie_bench
from modeling_miescore.testing.tiny_models import tiny_qwen3vl_config

SIDE = 128  # the fixture's image size, and the training size in trainers/configs/tiny_cpu.yaml


def ridge_srcc(features: np.ndarray, target: np.ndarray, train: np.ndarray, lam: float) -> float:
    x = (features - features[train].mean(0)) / (features[train].std(0) + 1e-8)
    x = np.c_[x, np.ones(len(x))]
    weights = np.linalg.solve(x[train].T @ x[train] + lam * np.eye(x.shape[1]), x[train].T @ target[train])
    return srcc(x[~train] @ weights, target[~train])


def vision_tower(processor, seed: int):
    from transformers import Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    return Qwen3VLForConditionalGeneration(tiny_qwen3vl_config(processor.tokenizer)).model.visual


def pooled_tokens(tower, pixels, grids, count: int) -> torch.Tensor:
    """Merger output per image, `(count, tokens, hidden)`."""
    out = tower(pixels, grid_thw=grids, return_dict=True).pooler_output
    return out.view(count, -1, out.shape[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        truth = make_raw_mie_bench(root, n_instances=40, image_size=SIDE)["truth"]
        edits = pd.read_json(root / "edits.jsonl", lines=True).set_index("edit_id")
        instances = pd.read_json(root / "instances.jsonl", lines=True).set_index("instance_id")
        edited = [Image.open(root / edits.loc[e, "image"]).convert("RGB") for e in truth.edit_id]
        first_source = [Image.open(root / instances.loc[i, "sources"][0]).convert("RGB") for i in truth.instance_id]
    target = truth.latent_vq.to_numpy()
    instance_number = truth.instance_id.str[-5:].astype(int).to_numpy()
    train = instance_number < 30

    processor = build_tiny_processor()
    size = {"min_pixels": SIDE * SIDE, "max_pixels": SIDE * SIDE}
    edit_inputs = processor.image_processor(images=edited, return_tensors="pt", **size)
    source_inputs = processor.image_processor(images=first_source, return_tensors="pt", **size)
    pixels, grids = edit_inputs["pixel_values"], edit_inputs["image_grid_thw"]
    count = len(edited)
    rows = {}

    # 1. pixel statistics, first temporal frame of every 16x16 patch
    patches = pixels.view(count, -1, 3, 2, 16, 16)[:, :, :, 0]
    energy = np.c_[
        np.log((patches[..., 1:] - patches[..., :-1]).pow(2).mean((1, 2, 3, 4)).numpy()),
        np.log((patches[..., 1:, :] - patches[..., :-1, :]).pow(2).mean((1, 2, 3, 4)).numpy()),
        np.log(patches.var((3, 4)).mean((1, 2)).numpy()),
    ]
    rows["pixel difference energies, linear"] = ridge_srcc(energy, target, train, 1.0)
    quadratic = np.c_[energy, energy**2, energy[:, :1] * energy[:, 2:]]
    rows["pixel difference energies, with squares"] = ridge_srcc(quadratic, target, train, 1.0)

    # 2./3. frozen random towers
    frozen, aligned = [], []
    with torch.no_grad():
        for seed in range(3):
            tower = vision_tower(processor, seed).eval()
            tokens = pooled_tokens(tower, pixels, grids, count)
            frozen.append(ridge_srcc(tokens.mean(1).numpy(), target, train, 10.0))
            source_tokens = pooled_tokens(tower, source_inputs["pixel_values"], source_inputs["image_grid_thw"], count)
            distance = (tokens - source_tokens).norm(dim=-1)
            aligned.append(ridge_srcc(np.log(np.c_[distance.median(1).values, distance.mean(1)]), target, train, 1.0))
    rows["frozen random tower, mean-pooled (3 seeds)"] = frozen
    rows["frozen random tower, edit minus source 1 per token (3 seeds)"] = aligned

    # 4. tower trained on VQ directly
    tower = vision_tower(processor, 0).train()
    head = torch.nn.Linear(tower.config.out_hidden_size, 1)
    optimizer = torch.optim.AdamW([*tower.parameters(), *head.parameters()], lr=3e-4)
    per_image = pixels.view(count, -1, pixels.shape[-1])
    train_idx, test_idx = np.flatnonzero(train), np.flatnonzero(~train)
    scaled = torch.tensor((target - 2.5) / 1.5, dtype=torch.float32)
    generator = np.random.default_rng(0)

    def predict(idx):
        tokens = pooled_tokens(tower, per_image[idx].reshape(-1, per_image.shape[-1]), grids[idx], len(idx))
        return head(tokens.mean(1)).squeeze(-1)

    trained = []
    for step in range(1, args.steps + 1):
        batch = generator.choice(train_idx, 16)
        loss = torch.nn.functional.mse_loss(predict(batch), scaled[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            with torch.no_grad():
                held_out = torch.cat([predict(test_idx[i:i + 32]) for i in range(0, len(test_idx), 32)])
            trained.append(srcc(held_out.numpy(), target[~train]))
    rows[f"tower trained on VQ, every 100 of {args.steps} steps"] = trained

    print(f"held-out SRCC with the planted latent VQ ({int((~train).sum())} edits of 10 instances)")
    for name, value in rows.items():
        print(f"  {name:<62} {json.dumps(np.round(value, 3).tolist())}")


if __name__ == "__main__":
    main()
