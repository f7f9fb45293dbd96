"""GPU throughput of MIEScore and SpatialReward at Qwen3-VL-8B size (random weights, bf16, no network).

One command measures, within a time budget (default 7 minutes, so it fits the lent machine's 10-minute
command limit with start-up to spare):
  * MIEScore scoring: samples/s, LM prefill tokens/s, model FLOP utilisation and peak memory for 2 and 3
    sources at 512^2 and 1024^2, with and without shared-prefix reuse, batch sizes 1-32;
  * the editor-RL reward step (``--reward miescore:CKPT``: ``MIEScoreReward.score_groups``, Flow-GRPO groups of
    G = 12 edits of one sources + instruction, appendix B.2.1 of the SpatialReward paper), with and without
    each group's shared prefix run once;
  * SpatialReward generation: new tokens/s for a batch of SC + PQ prompts.
and writes a markdown table (default ``benchmarks/gpu_results.md``) to paste into ``benchmarks/RESULTS.md``.

    python benchmarks/gpu_throughput.py                      # on the GPU machine
    python benchmarks/gpu_throughput.py --smoke              # seconds on CPU: tiny shapes, checks the code path

Models are built from config with random weights: throughput does not depend on the weights, and the lent
machine has no network. The tokenizer/processor is the tiny offline one (same image geometry as Qwen3-VL:
32 px per token); only token ids < its vocabulary occur, which is irrelevant to speed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

H200_BF16_DENSE_FLOPS = 989e12  # NVIDIA H200 SXM spec sheet, dense BF16 tensor-core peak


def backbone_config(tokenizer, smoke: bool):
    """The tiny test backbone (``--smoke``), else Qwen3-VL-8B-Instruct at its released widths and depth (its
    published config.json as ``qwen3vl_shapes.QWEN3_VL_8B`` restates it: the GPU machine has no network)."""
    from modeling_miescore.testing.qwen3vl_shapes import QWEN3_VL_8B, shaped_qwen3vl_config
    from modeling_miescore.testing.qwen_vocab import QWEN3_VL_VOCAB_SIZE
    from modeling_miescore.testing.tiny_models import tiny_qwen3vl_config

    if smoke:
        return tiny_qwen3vl_config(tokenizer)
    return shaped_qwen3vl_config(tokenizer, "8b", QWEN3_VL_8B["text"]["num_hidden_layers"],
                                 QWEN3_VL_8B["vision"]["depth"], vocab_size=QWEN3_VL_VOCAB_SIZE)


def make_samples(num_sources: int, size: int, instances: int, edits_per_instance: int, seed: int = 0):
    rng = np.random.default_rng(seed)

    def image():
        return Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8))

    samples = []
    for i in range(instances):
        sources = [image() for _ in range(num_sources)]
        instruction = f"Compose the subjects of the source images into one scene (instance {i})."
        samples += [{"sources": sources, "edited": image(), "instruction": instruction} for _ in range(edits_per_instance)]
    return samples


def lm_and_vision_params(model) -> tuple[int, int]:
    lm = sum(p.numel() for n, p in model.named_parameters() if "visual" not in n and "embed_tokens" not in n)
    vision = sum(p.numel() for n, p in model.named_parameters() if "visual" in n)
    return lm, vision


def token_accounting(model, samples, reuse: bool) -> tuple[int, int, int]:
    """(LM tokens processed, vision patches processed, LM tokens of the full prompts) for a workload."""
    from modeling_miescore.hub.prefix_reuse import find_groups
    from modeling_miescore.hub.processing_miescore import as_edit_sample, prepare_inputs

    processor = model.get_processor()
    loaded = [as_edit_sample(s).load() for s in samples]
    full_tokens = processed = patches = 0
    groups = find_groups(loaded) if reuse else [[i] for i in range(len(loaded))]
    for members in groups:
        for position, index in enumerate(members):
            batch = prepare_inputs(processor, [loaded[index]], model.config)
            ids, grids = batch["input_ids"][0], batch["image_grid_thw"]
            full_tokens += len(ids)
            prefix = int((ids == model.config.backbone_config.vision_start_token_id).nonzero()[-1]) + 1
            if reuse and len(members) > 1 and position > 0:
                processed += len(ids) - prefix
                patches += int(grids[-1].prod())
            else:  # a full forward (or the group's first edit, which also runs the shared prefix)
                processed += len(ids)
                patches += int(grids.prod(-1).sum())
    return processed, patches, full_tokens


def measure(fn, device: str, repeats: int) -> tuple[float, float]:
    """(best seconds, peak GiB) of fn() after one warm-up."""
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    return best, peak


def build_miescore(args, device, dtype, processor):
    from modeling_miescore.hub.configuration_miescore import MIEScoreConfig
    from modeling_miescore.hub.modeling_miescore import MIEScoreModel

    config = MIEScoreConfig(backbone_config=backbone_config(processor.tokenizer, args.smoke).to_dict())
    torch.manual_seed(0)
    with torch.device(device):
        model = MIEScoreModel(config).to(dtype).eval()
    model.processor = processor
    return model


def bench_miescore(model, args, device, dtype, rows, deadline):
    lm_params, vision_params = lm_and_vision_params(model)
    print(f"MIEScore: {lm_params / 1e9:.2f} B LM params, {vision_params / 1e9:.2f} B vision params, {dtype}")
    sizes = (64, 96) if args.smoke else (512, 1024)
    batch_sizes = (1, 4) if args.smoke else (1, 8, 32)
    for num_sources in (2, 3):
        for size in sizes:
            # two instances x 12 edits: the MIE-Bench layout (12 editing models per instance)
            samples = make_samples(num_sources, size, instances=2, edits_per_instance=2 if args.smoke else 12)
            for reuse in (False, True):
                processed, patches, full_tokens = token_accounting(model, samples, reuse)
                flops = 2 * lm_params * processed + 2 * vision_params * patches
                for batch_size in batch_sizes:
                    if time.time() > deadline:
                        rows.append((f"MIEScore {num_sources} src {size}^2", "reuse" if reuse else "full",
                                     batch_size, "skipped (time budget)", "", "", "", ""))
                        continue
                    try:
                        seconds, peak = measure(lambda: model.score_batch(samples, batch_size=batch_size,
                                                                          reuse_prefix=reuse), device, args.repeats)
                    except torch.OutOfMemoryError:
                        torch.cuda.empty_cache()
                        rows.append((f"MIEScore {num_sources} src {size}^2", "reuse" if reuse else "full",
                                     batch_size, "out of memory", "", "", "", ""))
                        continue
                    mfu = flops / seconds / H200_BF16_DENSE_FLOPS if device == "cuda" else float("nan")
                    rows.append((f"MIEScore {num_sources} src {size}^2", "reuse" if reuse else "full", batch_size,
                                 f"{len(samples) / seconds:.2f}", f"{processed / seconds:,.0f}",
                                 f"{full_tokens / seconds:,.0f}", f"{100 * mfu:.1f}%", f"{peak:.1f}"))
                    print(rows[-1], flush=True)


def bench_editor_rl_reward(model, args, device, rows, deadline):
    """The reward phase of one Flow-GRPO step through the editor-RL reward (the code path of ``--reward
    miescore:CKPT``): groups of G edits, each group's suffixes in one batch, with and without prefix reuse."""
    from modeling_miescore.rewards.backends import MIEScoreReward
    from modeling_miescore.rewards.groups import EditGroup, group_key

    lm_params, vision_params = lm_and_vision_params(model)
    group_size = 2 if args.smoke else 12
    size = 64 if args.smoke else 512
    samples = make_samples(2, size, instances=2 if args.smoke else 4, edits_per_instance=group_size, seed=3)
    groups = []
    for start in range(0, len(samples), group_size):
        first = samples[start]
        groups.append(EditGroup(group_key([f"instance-{start}"], first["instruction"]), tuple(first["sources"]),
                                first["instruction"], tuple(s["edited"] for s in samples[start:start + group_size])))
    workload = f"editor-RL reward, {len(groups)} groups x G={group_size}, 2 src {size}^2"
    for reuse in (False, True):
        if time.time() > deadline:
            rows.append((workload, "reuse" if reuse else "full", group_size, "skipped (time budget)", "", "", "", ""))
            continue
        reward = MIEScoreReward(model, batch_size=group_size, reuse_prefix=reuse)
        processed, patches, full_tokens = token_accounting(model, samples, reuse)
        flops = 2 * lm_params * processed + 2 * vision_params * patches
        try:
            seconds, peak = measure(lambda: reward.score_groups(groups), device, args.repeats)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            rows.append((workload, "reuse" if reuse else "full", group_size, "out of memory", "", "", "", ""))
            continue
        mfu = flops / seconds / H200_BF16_DENSE_FLOPS if device == "cuda" else float("nan")
        rows.append((workload, "reuse" if reuse else "full", group_size, f"{len(samples) / seconds:.2f}",
                     f"{processed / seconds:,.0f}", f"{full_tokens / seconds:,.0f}", f"{100 * mfu:.1f}%",
                     f"{peak:.1f}"))
        print(rows[-1], flush=True)


def bench_spatialreward_generation(args, device, dtype, processor, rows, deadline):
    from transformers import Qwen3VLForConditionalGeneration

    if time.time() > deadline:
        rows.append(("SpatialReward generation", "-", "-", "skipped (time budget)", "", "", "", ""))
        return
    config = backbone_config(processor.tokenizer, args.smoke)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration(config).to(dtype).eval()
    size = 64 if args.smoke else 512
    new_tokens = 16 if args.smoke else 256
    batch = 4 if args.smoke else 16  # 8 samples x (SC pass + PQ pass)
    rng = np.random.default_rng(1)
    images = [Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)) for _ in range(2 * batch)]
    messages = [[{"role": "user", "content": [{"type": "image"}, {"type": "image"},
                                              {"type": "text", "text": "Evaluate the edit as JSON."}]}]] * batch
    texts = [processor.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in messages]
    inputs = processor(text=texts, images=images, padding=True, padding_side="left", return_tensors="pt").to(device)
    inputs["pixel_values"] = inputs["pixel_values"].to(dtype)

    def generate():
        with torch.inference_mode():
            model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)

    seconds, peak = measure(generate, device, 1)
    rows.append((f"SpatialReward generate {size}^2, 2 images", "greedy", batch, f"{batch / seconds:.2f}",
                 f"{batch * new_tokens / seconds:,.0f} new tok/s", "", "", f"{peak:.1f}"))
    print(rows[-1], flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on CPU, to check the script")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting new measurements after this")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).with_name("gpu_results.md")))
    args = parser.parse_args()
    start = time.time()
    deadline = start + args.budget_s
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True

    from modeling_miescore.testing.tiny_models import build_tiny_processor
    from modeling_miescore.utils.markdown_table import markdown_table

    processor = build_tiny_processor()
    rows: list[tuple] = []
    model = build_miescore(args, device, dtype, processor)
    bench_miescore(model, args, device, dtype, rows, deadline - 120)
    bench_editor_rl_reward(model, args, device, rows, deadline - 60)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    bench_spatialreward_generation(args, device, dtype, processor, rows, deadline)

    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (smoke test, tiny shapes)"
    header = ["workload", "path", "batch", "samples/s", "LM tokens/s (processed)", "prompt tokens/s (effective)",
              "MFU", "peak GiB"]
    table = markdown_table(header, rows) + "\n"
    text = (f"# GPU throughput ({name}, {dtype}, random weights at Qwen3-VL-8B size)\n\n"
            f"Command: `python benchmarks/gpu_throughput.py`; total {time.time() - start:.0f} s. MFU counts "
            f"2 x params x tokens for the LM and the vision tower against {H200_BF16_DENSE_FLOPS / 1e12:.0f} "
            "TFLOP/s; 'effective' tokens/s divides the full prompt length of every sample by the time, so "
            "prefix reuse shows up as effective > processed.\n\n" + table)
    Path(args.out).write_text(text)
    print(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
