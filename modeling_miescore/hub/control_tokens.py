"""Chat-control tokens: the one rule for which text a tokenizer would read as a special token instead of words.

A control token is (:data:`CONTROL_TOKEN_RE`):

* any ``<|name|>`` without whitespace: every special and added token of the Qwen vocabulary, SpatialReward's
  grounding tokens (``<|bbox_0|>``, ``<|global|>``), other vocabularies' ``<|eot_id|>``, ``<|begin_of_text|>``, ...;
* the Qwen vocabulary's added tags (``<tool_call>``, ``<think>``, ...: :data:`QWEN_ADDED_TOKENS`);
* the image and video placeholders of the other backbone families (InternVL ``<img>``, ``</img>``,
  ``<IMG_CONTEXT>``, ``<video>``; LLaVA ``<image>``).

Where it applies, each through :func:`control_tokens_in`: a user's instruction is refused when it holds one
(:func:`modeling_miescore.hub.processing_miescore.control_token_problem`: API, CLI, score-batch, server, Space); text
from an endpoint is refused before it becomes training data (``modeling_miescore.utils.text_hygiene``); a
SpatialReward generation has them removed (:func:`modeling_miescore.hub.spatialreward_tokens.strip_control_tokens`).
Grounding tokens are the one difference, and a parameter: in text SpatialReward writes (its reasoning, its SFT
rows) they are the output format (``grounding_is_text=True``); in a user's instruction they are refused like any
other, since a SpatialReward tokenizer reads them as its own tokens.

Hub file: both kinds of checkpoint ship it (``processing_miescore`` and ``spatialreward_tokens`` import it);
it imports only the standard library.
"""

from __future__ import annotations

import re

__all__ = ["CONTROL_TOKEN_RE", "GROUNDING_TOKEN_RE", "QWEN_ADDED_TOKENS", "QWEN_CONTROL_TOKENS",
           "QWEN_FIRST_ADDED_ID", "QWEN_SPECIAL_TOKENS", "control_tokens_in", "is_grounding_token"]

# Qwen/Qwen3-VL-8B-Instruct tokenizer_config.json (added_tokens_decoder): ids 151643.. in this order. The first 14
# are special (skipped by skip_special_tokens), the other 12 are plain added tokens.
QWEN_FIRST_ADDED_ID = 151643  # = the number of BPE ranks: the id of <|endoftext|>
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
)
QWEN_ADDED_TOKENS = (
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
)
QWEN_CONTROL_TOKENS = QWEN_SPECIAL_TOKENS + QWEN_ADDED_TOKENS

# A grounding token as generated: group 1 is a box id, group 2 is "global". Besides the canonical form it
# accepts spaces inside the pipes (``<| bbox_0 |>``), a space or no underscore (``<|bbox 0|>``, ``<|bbox0|>``),
# any letter case and HTML-escaped angle brackets (``&lt;|bbox_0|&gt;``, as printed in the paper). The pipes
# are required. Ids above spatialreward_tokens.MAX_BBOX_ID match too, so that callers can report them.
GROUNDING_TOKEN_RE = re.compile(r"(?:<|&lt;)\|\s*(?:bbox\s*_?\s*(\d+)|(global))\s*\|(?:>|&gt;)", re.IGNORECASE)

_TAGS = "|".join(re.escape(t) for t in QWEN_ADDED_TOKENS if not t.startswith("<|"))
CONTROL_TOKEN_RE = re.compile(r"<\|[^<>|\s]{1,64}\|>|" + _TAGS + r"|</?(?:image|img|video|IMG_CONTEXT)>")


def is_grounding_token(token: str) -> bool:
    """Whether ``token`` (a :data:`CONTROL_TOKEN_RE` match) is one of SpatialReward's grounding tokens."""
    return GROUNDING_TOKEN_RE.fullmatch(token) is not None


def control_tokens_in(text: str, grounding_is_text: bool = False) -> list[str]:
    """The control tokens in ``text``, as found, in order; with ``grounding_is_text`` SpatialReward's grounding
    tokens are left out (they are the format of the text SpatialReward writes)."""
    found = [m.group() for m in CONTROL_TOKEN_RE.finditer(text)]
    return [t for t in found if not is_grounding_token(t)] if grounding_is_text else found
