"""SpatialReward's grounding vocabulary: ``<|bbox_0|>`` ... ``<|bbox_15|>``, ``<|global|>`` (sec. 3.2) and boxes.

Hub file: copied flat into checkpoints; imports only the standard library (transformers only inside a function).

:data:`GROUNDING_TOKEN_RE` (declared with the chat-control tokens in :mod:`.control_tokens`, which tells the two
apart) is the one pattern for these tokens in the package (the parser, the Space); it also accepts the variants
models and the paper write (see its comment), :func:`canonical_token` gives the canonical form of a match. Boxes are ``[x1, y1, x2, y2]`` on a 0..:data:`BBOX_SCALE` grid (appendix D.1.1).

The released model writes these tokens as plain text (they are prompt-level, appendix D.1), so inference must
work either way: when a fine-tuned checkpoint registered them as (special) tokens, ``skip_special_tokens=True``
would delete them from the decoded text, so generations are decoded with ``skip_special_tokens=False`` and
only the chat-control tokens (the rule of :mod:`.control_tokens`) are stripped afterwards
(:func:`strip_control_tokens`).
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, Optional

from .control_tokens import CONTROL_TOKEN_RE, GROUNDING_TOKEN_RE, is_grounding_token

MAX_BBOX_ID = 15  # the grounding vocabulary of sec. 3.2: <|bbox_0|> ... <|bbox_15|>
BBOX_TOKENS = tuple(f"<|bbox_{i}|>" for i in range(MAX_BBOX_ID + 1))
GLOBAL_TOKEN = "<|global|>"
GROUNDING_TOKENS = BBOX_TOKENS + (GLOBAL_TOKEN,)
BBOX_SCALE = 1000  # appendix D.1.1: "coordinates normalized to [0, 1000] range"



def strip_control_tokens(text: str, extra: Iterable[str] = ()) -> str:
    """Remove chat-control tokens (:mod:`.control_tokens`; and any ``extra`` strings, e.g. a custom pad token);
    keep grounding tokens.

    Everything after the first ``<|im_end|>`` / ``<|endoftext|>`` is dropped too: it is padding or a runaway
    continuation past the end of the assistant turn.
    """
    if not isinstance(text, str):
        return ""
    cut = len(text)
    for stop in ("<|im_end|>", "<|endoftext|>"):
        position = text.find(stop)
        if position != -1:
            cut = min(cut, position)
    text = CONTROL_TOKEN_RE.sub(lambda m: m.group() if is_grounding_token(m.group()) else "", text[:cut])
    for token in extra:
        if token and token not in GROUNDING_TOKENS:
            text = text.replace(token, "")
    return text.strip()


def grounding_token_ids(tokenizer) -> Optional[Dict[str, int]]:
    """``{token: id}`` when every grounding token is a single token of ``tokenizer``, else None (plain text)."""
    ids = {}
    for token in GROUNDING_TOKENS:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) != 1:
            return None
        ids[token] = int(encoded[0])
    return ids


def add_grounding_tokens(model, processor, special: bool = False) -> int:
    """Register the 17 grounding tokens in the tokenizer and grow the embeddings, for fine-tuning.

    Args:
        model: a ``Qwen3VLForConditionalGeneration`` (or ``SpatialRewardModel``); its input (and tied or untied
            output) embeddings are resized when the tokenizer outgrows them. New rows are initialised to the
            mean of the existing embeddings (transformers' ``mean_resizing``), so the tokens start out neutral.
        processor: the ``Qwen3VLProcessor`` (or a bare tokenizer).
        special: register them as special tokens. Default False: they are added as non-normalised added tokens,
            which are still single ids but survive ``skip_special_tokens=True`` in any downstream decoding
            (SFT collators, TRL logging), so no tool silently deletes the grounding.
    Returns:
        the number of tokens newly added to the tokenizer (0 when they were already there).
    """
    from transformers import AddedToken

    tokenizer = getattr(processor, "tokenizer", processor)
    vocab = tokenizer.get_vocab()
    new = [t for t in GROUNDING_TOKENS if t not in vocab]
    added = 0
    if new:
        tokens = [AddedToken(t, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)
                  for t in new]
        added = tokenizer.add_tokens(tokens, special_tokens=special)
    needed = len(tokenizer)
    embeddings = model.get_input_embeddings()
    if embeddings.num_embeddings < needed:
        # Qwen checkpoints over-allocate the vocabulary (151,936 rows for ~151,670 tokens): only grow if needed.
        model.resize_token_embeddings(needed, mean_resizing=True)
    return int(added)


def canonical_token(match: "re.Match[str]") -> str:
    """The canonical form (``<|bbox_3|>``, ``<|global|>``) of a :data:`GROUNDING_TOKEN_RE` match."""
    return GLOBAL_TOKEN if match.group(2) is not None else f"<|bbox_{int(match.group(1))}|>"


__all__ = [
    "BBOX_SCALE",
    "BBOX_TOKENS",
    "GLOBAL_TOKEN",
    "GROUNDING_TOKENS",
    "GROUNDING_TOKEN_RE",
    "MAX_BBOX_ID",
    "add_grounding_tokens",
    "canonical_token",
    "grounding_token_ids",
    "strip_control_tokens",
]
