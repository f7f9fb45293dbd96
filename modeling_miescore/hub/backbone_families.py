"""What differs between the vision-language families a MIEScore backbone can come from.

MIEScore puts one regression head on the base model of any transformers-native image-text-to-text model whose
forward returns ``last_hidden_state`` (``MIEScoreModel.from_backbone``). Three things depend on the family:

* the image-size arguments of its image processor, i.e. what ``config.max_pixels`` / ``config.min_pixels`` mean;
* how many prompt tokens an image becomes (used to sort batches by length and to fit training rows);
* whether the shared prompt prefix of several edits can be run once (``prefix_reuse``) with results equal to the
  full forward (tested in tests/hub/test_backbone_families.py, suffix == full forward to 1e-4 in float32).

============  =====================================  ==========================================  ============
family        model types                            ``max_pixels`` means                        prefix reuse
============  =====================================  ==========================================  ============
``qwen_vl``   qwen2_vl, qwen2_5_vl, qwen3_vl(_moe)   pixel budget per image: the image is        exact
                                                     resized into [min_pixels, max_pixels] in
                                                     steps of patch x merge px (smart_resize)
``internvl``  internvl (InternVL3.5 ``-HF``)         tile budget: at most max_pixels // tile²    exact
                                                     tiles of tile x tile px (448 for
                                                     InternVL3.5, so 5 at 1,048,576), plus one
                                                     thumbnail tile when more than one is used;
                                                     min_pixels // tile² is the least number
``generic``   any other                              not applied: the processor's defaults       no
============  =====================================  ==========================================  ============

Qwen-VL positions are 3-D (M-RoPE, ``get_rope_index``), InternVL's are 1-D; both have a special token right
before each image's tokens to cut the prompt at (``<|vision_start|>`` / ``<img>``), and both encode each image
(Qwen-VL) or tile (InternVL) on its own, so the edited image can be encoded apart from the sources.

Configs without a ``backbone_config`` (SpatialReward's, a Qwen3-VL config) are ``qwen_vl``.

Hub file: copied into checkpoints; imports only transformers (lazily) and the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackboneFamily:
    """A family of VLMs that share image preprocessing and position scheme."""

    name: str
    model_types: tuple
    prefix_reuse: bool


QWEN_VL = BackboneFamily("qwen_vl", ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"), prefix_reuse=True)
INTERNVL = BackboneFamily("internvl", ("internvl",), prefix_reuse=True)
GENERIC = BackboneFamily("generic", (), prefix_reuse=False)
FAMILIES = (QWEN_VL, INTERNVL)
# model types that are another one with extra fields: SpatialRewardConfig is a Qwen3-VL configuration
_SAME_AS = {"spatialreward": "qwen3_vl"}


def backbone_config_of(config):
    """The VLM configuration: ``config.backbone_config`` (MIEScore) or the config itself (SpatialReward)."""
    return getattr(config, "backbone_config", None) or config


def family_of(config) -> BackboneFamily:
    """The family of a MIEScore config's backbone (``GENERIC`` for model types not listed above)."""
    model_type = getattr(backbone_config_of(config), "model_type", None)
    model_type = _SAME_AS.get(model_type, model_type)
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    return GENERIC


def is_vlm_model_type(model_type) -> bool:
    """Whether ``model_type`` is a transformers-native image-text-to-text model (a candidate backbone)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def qwen_patch_factor(config) -> int:
    """Pixels per image-token side for Qwen-VL: patch size x merge size (16 x 2 = 32 for Qwen3-VL, 14 x 2 = 28
    for Qwen2.5-VL)."""
    vision = getattr(backbone_config_of(config), "vision_config", None)
    patch = getattr(vision, "patch_size", 16)
    return int(patch if isinstance(patch, int) else patch[0]) * int(getattr(vision, "spatial_merge_size", 2))


def internvl_tile_side(config) -> int:
    """Side of one InternVL tile in pixels: the vision tower's input size (448 for InternVL3.5)."""
    size = backbone_config_of(config).vision_config.image_size
    return int(size if isinstance(size, int) else size[0])


def internvl_tile_budget(config, max_pixels: int | None = None, min_pixels: int | None = None) -> tuple[int, int]:
    """``(min_patches, max_patches)`` of the InternVL image processor for a pixel budget (default: the config's):
    at most ``max_pixels // tile²`` tiles, at least one, and ``min_pixels // tile²`` as the least number."""
    area = internvl_tile_side(config) ** 2
    most = max(1, int(max_pixels or config.max_pixels) // area)
    least = min(most, max(1, int(min_pixels or config.min_pixels) // area))
    return least, most


def internvl_size_kwargs(config, max_pixels: int | None = None, min_pixels: int | None = None) -> dict:
    least, most = internvl_tile_budget(config, max_pixels, min_pixels)
    return {"crop_to_patches": True, "min_patches": least, "max_patches": most}


def internvl_num_tiles(width: int, height: int, config, max_pixels: int | None = None,
                       min_pixels: int | None = None) -> int:
    """Tiles the InternVL image processor makes of one image (the grid, plus the thumbnail when the grid has more
    than one tile), by transformers' own grid choice (``get_optimal_tiled_canvas``)."""
    from transformers.models.got_ocr2.image_processing_got_ocr2 import get_optimal_tiled_canvas

    least, most = internvl_tile_budget(config, max_pixels, min_pixels)
    if most <= 1:
        return 1
    side = internvl_tile_side(config)
    columns, rows = get_optimal_tiled_canvas((int(height), int(width)), (side, side), least, most)
    return 1 if columns * rows == 1 else columns * rows + 1


def internvl_image_tokens(width: int, height: int, config, max_pixels: int | None = None,
                          min_pixels: int | None = None) -> int:
    """Tokens that replace one image placeholder in an InternVL prompt: ``<img>``, ``image_seq_length`` context
    tokens per tile, ``</img>``."""
    per_tile = int(backbone_config_of(config).image_seq_length)
    return per_tile * internvl_num_tiles(width, height, config, max_pixels, min_pixels) + 2


def min_image_budget(config) -> int:
    """The smallest pixel budget that still gives an image its minimum number of tokens: one Qwen-VL token
    (factor² pixels) or one InternVL tile."""
    family = family_of(config)
    if family is INTERNVL:
        return internvl_tile_side(config) ** 2
    return qwen_patch_factor(config) ** 2


__all__ = ["BackboneFamily", "FAMILIES", "GENERIC", "INTERNVL", "QWEN_VL", "backbone_config_of", "family_of",
           "internvl_image_tokens", "internvl_num_tiles", "internvl_size_kwargs", "internvl_tile_budget",
           "internvl_tile_side", "is_vlm_model_type", "min_image_budget", "qwen_patch_factor"]
