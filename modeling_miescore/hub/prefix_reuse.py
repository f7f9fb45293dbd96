"""Shared-prefix reuse: run the sources + instruction once, then only each edit's suffix.

In MIE-Bench every instance has 12 edits of the same sources and instruction, and in RL an editor produces G
candidates per prompt. With the edited image last in the prompt, everything up to the token that opens the edited
image (``<|vision_start|>`` for Qwen-VL, ``<img>`` for InternVL) is shared. We run that prefix once, keep its KV
cache, and run the G suffixes (edited image tokens + the constant closing text) on copies of the cache: for scoring
(MIEScore, :func:`suffix_hidden_states`; Qwen-VL and InternVL backbones, ``backbone_families``) and for greedy
generation (SpatialReward's SC stream, Qwen3-VL, :func:`generate_from_prefix`). The measurements behind the points
below are in the MIEScore repository, docs/prefix_reuse.md.

What makes the result equal to the full forward:

1. Positions. Qwen-VL's rotary positions are 3-D (M-RoPE) and an image advances them by its grid, not by its
   token count, so the suffix gets explicit ``position_ids`` sliced from ``get_rope_index`` over the FULL
   sequence. Without them the model silently derives wrong ones (from ``rope_deltas`` left by an earlier call,
   or restarting at 0). InternVL's positions are 1-D (the token index), also passed explicitly.
2. Images. The suffix call receives the edited image's own pixels (Qwen-VL: ``pixel_values`` / ``image_grid_thw``;
   InternVL: its tiles); the model then encodes it (Qwen3-VL also adds its deepstack features at the suffix's
   image tokens). Both towers encode each image (Qwen-VL) or tile (InternVL) on its own, so the features equal
   those of the full batch. The sources' contributions already live in the prefix KV. Passing the sources' pixels
   again fails with an "image features and image tokens do not match" error.
3. The cut. The prompt is split right after a special token, so BPE merges are the same on both sides; the chat
   template glues text pieces without separators, and a cut inside text could merge differently.
4. The cache. It must hold exactly the prefix tokens: attention masks take their offset from the cache length.
   ``forward`` and ``generate`` extend the cache they get in place, so every use gets ``copy.deepcopy`` of it,
   repeated along the batch with ``batch_repeat_interleave``.

Exactness: equal to float rounding, not bit for bit (other GEMM shapes, an explicit mask instead of the causal
fast path): about 1e-6 in fp32 and about one rounding step in bf16, where greedy decoding could in principle flip
at a near-tie. Greedy generation on top of it returned the same tokens as the plain path in every check.
Speed: the language model sees ``P + G*S`` instead of ``G*L`` tokens (prefix P, suffix S, full L), and the vision
tower encodes ``n_sources + G`` instead of ``G*(n_sources + 1)`` images; ~3x on CPU for 12 edits of 3 sources.
Memory: a batch of G suffixes holds G copies of the prefix KV.

Hub file: copied into checkpoints; imports torch/transformers and flat siblings only.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Sequence

import torch
from transformers import DynamicCache

from .backbone_families import INTERNVL, family_of
from .processing_miescore import EditSample, image_size_kwargs, prepare_inputs


def _pixel_digest(image) -> bytes:
    digest = hashlib.blake2b(f"|{image.mode}{image.size}|".encode(), digest_size=16)
    digest.update(image.tobytes())
    return digest.digest()


def group_key(sample: EditSample, image_digests: dict | None = None) -> str:
    """Content key of what an edit shares with its siblings: the instruction and the source pixels (each image
    object hashed once per ``image_digests``)."""
    digests = {} if image_digests is None else image_digests
    key = hashlib.blake2b(sample.instruction.encode("utf-8"), digest_size=16)
    for image in sample.sources:
        if id(image) not in digests:
            # the image is kept beside its digest so that its id cannot be reused by another object meanwhile
            digests[id(image)] = (image, _pixel_digest(image))
        key.update(digests[id(image)][1])
    return key.hexdigest()


def find_groups(samples: Sequence[EditSample], group_ids: Sequence | None = None) -> list[list[int]]:
    """Indices of samples that share sources and instruction, in order of first appearance (or as ``group_ids``
    says, checked: ``ValueError`` naming two samples of one group that differ)."""
    image_digests: dict = {}
    keys = [group_key(s, image_digests) for s in samples]
    groups: dict = {}
    if group_ids is None:
        for index, key in enumerate(keys):
            groups.setdefault(key, []).append(index)
        return list(groups.values())
    if len(group_ids) != len(samples):
        raise ValueError(f"got {len(group_ids)} group ids for {len(samples)} samples")
    for index, group in enumerate(group_ids):
        members = groups.setdefault(group, [])
        if members and keys[members[0]] != keys[index]:
            raise ValueError(
                f"samples {members[0]} and {index} are both in group {group!r} but differ in sources or "
                "instruction; only edits of the same sources and instruction can share a prefix"
            )
        members.append(index)
    return list(groups.values())


def _prefix_length(input_ids: torch.Tensor, cut_token_id: int) -> int:
    """Length of the shared prefix: everything up to and including the token that opens the edited image."""
    starts = (input_ids == cut_token_id).nonzero()
    return int(starts[-1]) + 1


@dataclass
class _EncodedImages:
    """The images of one group (sources, then every edit) as the image processor makes them, split per image."""

    chunks: list            # pixel rows (Qwen-VL) or tiles (InternVL) of each image
    grids: torch.Tensor | None  # Qwen-VL: (num_images, 3) patch grids
    tokens: list            # image tokens of each image in the prompt (its run of image_token_id)
    keys: list              # what an edit's suffix depends on: its grid (Qwen-VL) or tile count (InternVL)

    def vision_inputs(self, indices: Sequence[int], device, dtype) -> dict:
        inputs = {"pixel_values": torch.cat([self.chunks[i] for i in indices]).to(device, dtype)}
        if self.grids is not None:
            inputs["image_grid_thw"] = self.grids[list(indices)].to(device)
        return inputs


def _encode_images(family, backbone, processor, images: list, config) -> _EncodedImages:
    out = processor.image_processor(images=images, return_tensors="pt", **image_size_kwargs(config))
    if family is INTERNVL:
        tiles = [int(n) for n in out["num_patches"]]
        per_tile = int(backbone.config.image_seq_length)
        return _EncodedImages(list(torch.split(out["pixel_values"], tiles)), None, [per_tile * n for n in tiles], tiles)
    grids = out["image_grid_thw"]
    rows = [int(r) for r in grids.prod(-1)]
    merge = backbone.config.vision_config.spatial_merge_size
    return _EncodedImages(list(torch.split(out["pixel_values"], rows)), grids, [r // merge**2 for r in rows],
                          [tuple(g.tolist()) for g in grids])


def _full_positions(family, backbone, full_ids: torch.Tensor, grids: torch.Tensor | None) -> torch.Tensor:
    """(R, L) positions of one unpadded sequence: the 3 M-RoPE rows (Qwen-VL) or the token index (R = 1)."""
    if family is INTERNVL:
        return torch.arange(len(full_ids), device=full_ids.device)[None]
    return rope_positions(backbone, full_ids, grids.to(full_ids.device))


def _suffixes(family, backbone, prefix_ids: torch.Tensor, closing: torch.Tensor, images: _EncodedImages,
              num_sources: int):
    """Suffix tokens and (R, S) positions of every edit (computed once per edited-image grid or tile count), and
    the (R, P) positions of the prefix."""
    image_token_id = backbone.config.image_token_id
    by_key, suffixes, positions = {}, [], []
    for i in range(num_sources, len(images.tokens)):
        if images.keys[i] not in by_key:
            suffix = torch.cat([prefix_ids.new_full((images.tokens[i],), image_token_id), closing])
            grids = None if images.grids is None else images.grids[[*range(num_sources), i]]
            pos = _full_positions(family, backbone, torch.cat([prefix_ids, suffix]), grids)
            by_key[images.keys[i]] = (suffix, pos[:, len(prefix_ids):], pos[:, :len(prefix_ids)])
        suffix, suffix_positions, prefix_positions = by_key[images.keys[i]]
        suffixes.append(suffix)
        positions.append(suffix_positions)
    return suffixes, positions, prefix_positions


def _pack_suffixes(suffixes: Sequence[torch.Tensor], positions: Sequence[torch.Tensor], pad_id: int):
    """Right-padded (B, W) ids and (R, B, W) positions of a batch of suffixes, and their lengths."""
    lengths = [len(suffix) for suffix in suffixes]
    ids = suffixes[0].new_full((len(suffixes), max(lengths)), pad_id)
    pos = positions[0].new_zeros((positions[0].shape[0], len(suffixes), max(lengths)))
    for row, (suffix, suffix_positions) in enumerate(zip(suffixes, positions)):
        ids[row, : len(suffix)] = suffix
        pos[:, row, : len(suffix)] = suffix_positions
        # right padding after the last real token: causal attention never lets earlier tokens see it
        pos[:, row, len(suffix):] = suffix_positions[:, -1:]
    return ids, pos, lengths


@dataclass
class SharedPrefixInputs:
    """CPU model inputs of a group of edits that share their prompt prefix (:func:`prepare_shared_prefix`): the
    prefix `(1, P)` and its positions `(R, 1, P)`, the sources' then every edit's pixels, and each edit's suffix
    and positions `(R, S_i)` (R = 3 M-RoPE rows for Qwen-VL, 1 for InternVL, whose backbone takes them flat)."""

    prefix_ids: torch.Tensor
    prefix_positions: torch.Tensor
    images: _EncodedImages
    num_sources: int
    suffixes: list
    positions: list
    pad_id: int
    flat_positions: bool

    def __len__(self) -> int:
        return len(self.suffixes)

    def model_positions(self, positions: torch.Tensor, device) -> torch.Tensor:
        """(R, B, L) positions as the backbone takes them, on ``device``."""
        return (positions[0] if self.flat_positions else positions).to(device)


def prepare_shared_prefix(backbone, processor, samples: Sequence[EditSample], config) -> SharedPrefixInputs:
    """The inputs of :func:`suffix_hidden_states` for a group of edits, on the CPU (no forward pass, so it can run
    on another thread while the model runs an earlier batch)."""
    family = family_of(config)
    if config.image_order != "sources_first" or not family.prefix_reuse:
        raise ValueError("prefix reuse needs a Qwen-VL or InternVL backbone and the edited image last "
                         "(image_order='sources_first')")
    num_sources = len(samples[0].sources)
    # Sample 0 gives the prefix tokens and the constant closing text; every edit then only needs its own image.
    ids = prepare_inputs(processor, [samples[0]], config)["input_ids"]
    images = _encode_images(family, backbone, processor, [*samples[0].sources, *(s.edited for s in samples)], config)
    cut = processor.start_image_token_id if family is INTERNVL else backbone.config.vision_start_token_id
    prefix_len = _prefix_length(ids[0], cut)
    closing = ids[0, prefix_len + images.tokens[num_sources]:]
    suffixes, positions, prefix_positions = _suffixes(family, backbone, ids[0, :prefix_len], closing, images,
                                                      num_sources)
    return SharedPrefixInputs(prefix_ids=ids[:, :prefix_len], prefix_positions=prefix_positions[:, None],
                              images=images, num_sources=num_sources, suffixes=suffixes, positions=positions,
                              pad_id=processor.tokenizer.pad_token_id or 0, flat_positions=family is INTERNVL)


@torch.inference_mode()
def shared_prefix_hidden_states(backbone, inputs: SharedPrefixInputs, batch_size: int) -> torch.Tensor:
    """The last-token hidden state of each edit of a prepared group, `(G, hidden_size)`: the prefix once, then the
    suffixes ``batch_size`` at a time on copies of its KV cache."""
    device, dtype = backbone.device, backbone.dtype
    cache = build_prefix_cache(backbone, inputs.prefix_ids[0], inputs.model_positions(inputs.prefix_positions, device),
                               **inputs.images.vision_inputs(range(inputs.num_sources), device, dtype))
    hidden = []
    for start in range(0, len(inputs), batch_size):
        idx = list(range(start, min(start + batch_size, len(inputs))))
        batch_ids, batch_pos, lengths = _pack_suffixes([inputs.suffixes[i] for i in idx],
                                                       [inputs.positions[i] for i in idx], inputs.pad_id)
        group_cache = copy.deepcopy(cache)
        group_cache.batch_repeat_interleave(len(idx))
        out = backbone(input_ids=batch_ids.to(device), position_ids=inputs.model_positions(batch_pos, device),
                       cache=group_cache, use_cache=True,
                       **inputs.images.vision_inputs([inputs.num_sources + i for i in idx], device, dtype))
        last = torch.tensor([n - 1 for n in lengths], device=device)
        hidden.append(out.last_hidden_state[torch.arange(len(idx), device=device), last])
    return torch.cat(hidden)


def suffix_hidden_states(backbone, processor, samples: Sequence[EditSample], config, batch_size: int) -> torch.Tensor:
    """Last-token hidden states `(len(samples), hidden_size)` of loaded edits sharing sources and instruction,
    equal to those of full forward passes (Qwen-VL or InternVL base model, edited image last)."""
    return shared_prefix_hidden_states(backbone, prepare_shared_prefix(backbone, processor, samples, config),
                                       batch_size)


# ------------------------------------------------------------------------------------------------------------
# Generation on copies of a prefix cache (SpatialReward's SC stream). ``generate`` gets the FULL input_ids laid
# out as ``[prefix | pads | row tokens]``, a 2-D attention mask that is zero on the pads, and explicit (4, B, L)
# positions (the text index, then the three M-RoPE rows); it then feeds only the tokens not in the cache, encodes
# only the ``pixel_values`` given (the rows' own images), and extends every position row by last + 1 per
# generated token (``GenerationMixin._update_model_kwargs_for_generation``), which is what the plain path does
# after the final text token.
# ------------------------------------------------------------------------------------------------------------


def rope_positions(base_model, input_ids: torch.Tensor, image_grid_thw: torch.Tensor | None) -> torch.Tensor:
    """`(3, L)` M-RoPE positions of one unpadded sequence `(L,)` (placeholders expanded; grids None: text only)."""
    ids = input_ids[None]
    if image_grid_thw is None or len(image_grid_thw) == 0:
        return torch.arange(ids.shape[1], device=ids.device).expand(3, -1).clone()
    mm_types = (ids == base_model.config.image_token_id).int()
    positions, _ = base_model.get_rope_index(ids, mm_types, image_grid_thw)
    return positions[:, 0]


@torch.inference_mode()
def build_prefix_cache(base_model, input_ids: torch.Tensor, position_ids: torch.Tensor,
                       **vision_inputs) -> DynamicCache:
    """The batch-1 KV cache of a prefix `(P,)` run with its own images (``vision_inputs``, on the model's device)
    and ``position_ids`` as the model takes them, sliced from the full sequence's. Never pass it to ``generate``
    itself (it is extended in place): ``generate_from_prefix`` copies it."""
    cache = DynamicCache(config=base_model.config)
    base_model(input_ids=input_ids[None].to(base_model.device), position_ids=position_ids.to(base_model.device),
               cache=cache, use_cache=True, **vision_inputs)
    return cache


def pack_rows_after_prefix(prefix_ids: torch.Tensor, prefix_positions: torch.Tensor, rows: Sequence, pad_id: int):
    """Lay out generation rows ``(ids, positions (3, S_i), continues_prefix)`` behind a cached prefix:
    ``[prefix | pads | row tokens]``, all rows one width; ``(input_ids, attention_mask, position_ids (4, B, P+W))``.

    A row that does not continue the prefix attends to none of it (mask zero), exactly like a left-padded row of a
    plain batch. Position row 0 is the text index (what ``generate`` derives from the mask), rows 1-3 M-RoPE; the
    last column is every row's last real token, so ``generate`` continues each row's positions correctly.
    """
    prefix_len = len(prefix_ids)
    width = max(len(ids) for ids, _, _ in rows)
    total = prefix_len + width
    batch = len(rows)
    input_ids = prefix_ids.new_full((batch, total), pad_id)
    attention_mask = prefix_ids.new_zeros((batch, total))
    position_ids = prefix_ids.new_zeros((4, batch, total))
    prefix_text = torch.arange(prefix_len, device=prefix_ids.device)
    for b, (ids, positions, continues_prefix) in enumerate(rows):
        length = len(ids)
        input_ids[b, total - length:] = ids
        attention_mask[b, total - length:] = 1
        position_ids[1:, b, total - length:] = positions
        start = prefix_len if continues_prefix else 0
        position_ids[0, b, total - length:] = torch.arange(start, start + length, device=prefix_ids.device)
        if continues_prefix:
            input_ids[b, :prefix_len] = prefix_ids
            attention_mask[b, :prefix_len] = 1
            position_ids[0, b, :prefix_len] = prefix_text
            position_ids[1:, b, :prefix_len] = prefix_positions
    return input_ids, attention_mask, position_ids


@torch.inference_mode()
def generate_from_prefix(model, prefix_cache: DynamicCache, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         position_ids: torch.Tensor, pixel_values: torch.Tensor | None,
                         image_grid_thw: torch.Tensor | None, **generate_kwargs) -> torch.Tensor:
    """The new tokens `(B, new)` of ``model.generate`` for rows packed by ``pack_rows_after_prefix`` on a copy of
    a batch-1 prefix cache (left untouched), given the rows' own images only (never the prefix's)."""
    cache = copy.deepcopy(prefix_cache)
    cache.batch_repeat_interleave(input_ids.shape[0])
    device = model.device
    if pixel_values is not None:
        pixel_values = pixel_values.to(device, model.dtype)
        image_grid_thw = image_grid_thw.to(device)
    output = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                            position_ids=position_ids.to(device), pixel_values=pixel_values,
                            image_grid_thw=image_grid_thw, cache=cache, **generate_kwargs)
    return output[:, input_ids.shape[1]:]
