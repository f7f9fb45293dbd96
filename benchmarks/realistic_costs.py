"""Token counts (MIEScore, SpatialReward) and a FLOP model of MIEScore scoring with and without prefix reuse.

The FLOP model counts the matrix products (2 FLOPs per weight and token or patch) and attention (4 FLOPs per
head dimension and query-key pair; causal in the language model, full inside each image in the vision tower):

* language model, per layer: q/k/v/o projections and the gated MLP per token, attention per pair;
* vision tower: patch embedding and blocks per patch, attention inside each image, and the patch merger plus
  one merger per deepstack tap per merged token (4 patches).

Without reuse, G edits cost G full prompts of L tokens and G * (n + 1) images; with reuse, the prefix of P
tokens once plus G suffixes of S tokens that attend to the prefix, and n + G images. The ratio of the two is
the speed-up a perfect implementation would reach; the token ceiling G*L / (P + G*S) ignores the images.
"""

from __future__ import annotations

IN_CHANNELS = 3  # RGB


def token_counts(model, sample) -> tuple[int, int, int, int]:
    """``(L, P, S, patches of the edited image)`` of one sample's prompt, P cut after the edited image's
    ``<|vision_start|>`` as prefix reuse cuts it."""
    from modeling_miescore.hub.processing_miescore import as_edit_sample, prepare_inputs

    loaded = as_edit_sample(sample).load()
    batch = prepare_inputs(model.get_processor(), [loaded], model.config)
    ids = batch["input_ids"][0]
    prefix = int((ids == model.config.backbone_config.vision_start_token_id).nonzero()[-1]) + 1
    return len(ids), prefix, len(ids) - prefix, int(batch["image_grid_thw"][-1].prod())


def spatialreward_token_counts(model, sample) -> tuple[int, int, int]:
    """``(SC length, shared SC prefix, PQ length)`` of one edit's SpatialReward prompts, as the in-process
    model builds them (the prefix is cut after the edited image's ``<|vision_start|>``)."""
    from modeling_miescore.hub.modeling_spatialreward import pq_messages, sc_messages
    from modeling_miescore.hub.processing_miescore import as_edit_sample, image_size_kwargs

    loaded = as_edit_sample(sample).load()
    processor = model.get_processor()

    def ids(messages, images):
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return processor(text=[text], images=images, return_tensors="pt", **image_size_kwargs(model.config))[
            "input_ids"][0]

    sc = ids(sc_messages(model.config, len(loaded.sources), loaded.instruction), [*loaded.sources, loaded.edited])
    pq = ids(pq_messages(model.config), [loaded.edited])
    prefix = int((sc == model.config.vision_start_token_id).nonzero()[-1]) + 1
    return len(sc), prefix, len(pq)


def language_flops(text: dict, tokens: float, pairs: float) -> float:
    hidden, inner = text["hidden_size"], text["intermediate_size"]
    queries = text["num_attention_heads"] * text["head_dim"]
    keys = text["num_key_value_heads"] * text["head_dim"]
    per_token = 2 * (2 * hidden * queries + 2 * hidden * keys + 3 * hidden * inner)
    return text["num_hidden_layers"] * (per_token * tokens + 4 * queries * pairs)


def vision_flops(vision: dict, patches: int, images: int) -> float:
    width, inner, depth = vision["hidden_size"], vision["intermediate_size"], vision["depth"]
    merge = vision["spatial_merge_size"] ** 2
    embed = 2 * IN_CHANNELS * vision["temporal_patch_size"] * vision["patch_size"] ** 2 * width
    blocks = 2 * (4 * width * width + 2 * width * inner) * depth
    attention = 4 * width * depth * patches**2
    merger = 2 * ((merge * width) ** 2 + merge * width * vision["out_hidden_size"])
    mergers = merger * (1 + len(vision["deepstack_visual_indexes"])) * (patches // merge)
    return images * ((embed + blocks) * patches + attention + mergers)


def cost_ceiling(backbone, length: int, prefix: int, suffix: int, patches: int, sources: int, group: int,
                 released: str | None = None):
    """FLOPs without reuse / FLOPs with reuse for ``group`` edits of ``sources`` sources. ``released``: use the
    released depth of that shape (``qwen3vl_shapes.RELEASED_SHAPES``) instead of the checkpoint's; "-" for a
    shape without one."""
    if released is None:
        text, vision = backbone.get_text_config().to_dict(), backbone.vision_config.to_dict()
    else:
        from modeling_miescore.testing.qwen3vl_shapes import RELEASED_SHAPES

        if released not in RELEASED_SHAPES:
            return "-"
        text, vision = RELEASED_SHAPES[released]["text"], RELEASED_SHAPES[released]["vision"]
    none = group * (language_flops(text, length, length**2 / 2) + vision_flops(vision, patches, sources + 1))
    reuse = (language_flops(text, prefix, prefix**2 / 2)
             + group * language_flops(text, suffix, suffix * prefix + suffix**2 / 2)
             + vision_flops(vision, patches, sources + group))
    ratio = none / reuse
    return ratio if released is None else f"{ratio:.2f}x"
