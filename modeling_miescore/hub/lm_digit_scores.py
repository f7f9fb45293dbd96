"""Scores read from the language model's own next-token probabilities instead of a regression head.

This is the "without score head" setting of the MIEScore paper's ablation (Table 5, rows 1 and 4: "Score Head"
unchecked; the paper does not say how such a model gives its scores). Here the model answers in the JSON
format that the skill-optimisation evaluator is asked for (:func:`answer_format`, the same text)::

    {"visual_quality": 4, "instruction_following": 3, "attribute_preservation": 5}

and each score is read where the model writes it: after ``{"visual_quality": `` the next-token probabilities of
the digits ``0 .. score_max`` are renormalised over those digits, and the score is the expected digit divided by
``score_max`` (a number in [0, 1], like the head's sigmoid; reading level tokens by expectation as Q-Align does).
Only the rows of the language model's output projection for those digits are kept (:class:`DigitScoreReader`),
so nothing new is learned on top of the backbone: row 4 (zero-shot, skill only) reads the pretrained model as
it is, row 1 fine-tunes it with LoRA.

* Scoring and evaluation: the digit written before dimension k is the model's own greedy choice (what greedy
  generation would write), so K dimensions take K forward passes over prompt + answer so far
  (:func:`greedy_digit_logits`).
* Training: teacher forcing. The human MOS, rounded onto 0..score_max, are written into the answer and all K
  dimensions are read in one pass (:func:`teacher_forced_digit_logits`); the loss is the one used with the head
  (eq. 13 on the expected scores), so the two rows differ only in the head.

Batches must be left-padded, so that the answer can be appended at the right end of every row.

Hub file: copied into checkpoints; imports only torch and the standard library.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

# Per-token inputs a processor may return besides input_ids, and the value an appended text token gets.
_PER_TOKEN_FILL = {"attention_mask": 1, "mm_token_type_ids": 0, "token_type_ids": 0}


def answer_format(score_names: Sequence[str], score_max: float) -> str:
    """The answer-format instruction placed after the prompt (and after the skill in skill optimisation)."""
    fields = ", ".join(f'"{name}": <score>' for name in score_names)
    return f"Answer with one JSON object and nothing else, each score a number from 0 to {score_max:g}:\n{{{fields}}}"


def answer_prefixes(score_names: Sequence[str]) -> list[str]:
    """The answer text before each score: ``{"visual_quality": ``, ``, "instruction_following": ``, ..."""
    return [("{" if k == 0 else ", ") + f'"{name}": ' for k, name in enumerate(score_names)]


def tokenize_answer(tokenizer, score_names: Sequence[str], score_max: int) -> tuple[list[list[int]], list[int]]:
    """``(prefix token ids per dimension, token id of each digit 0..score_max)`` for ``tokenizer``.

    Raises ``ValueError`` when a digit is not one token, or when the answer tokenised whole differs from its pieces
    glued together (a BPE merge across a cut would make the teacher-forced answer differ from a generated one).
    """
    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    digits = [encode(str(d)) for d in range(int(score_max) + 1)]
    if any(len(d) != 1 for d in digits):
        raise ValueError(f"the tokenizer does not encode each digit 0..{score_max} as one token; the score head "
                         "'lm_digits' reads one digit token per score")
    texts = answer_prefixes(score_names)
    prefixes = [encode(text) for text in texts]
    for d, (digit,) in enumerate(digits):
        whole = encode("".join(text + str(d) for text in texts))
        glued = [token for prefix in prefixes for token in (*prefix, digit)]
        if whole != glued:
            raise ValueError(f"the tokenizer merges the answer {''.join(t + str(d) for t in texts)!r} differently "
                             "from its pieces; the score head 'lm_digits' cannot read it")
    return prefixes, [d[0] for d in digits]


class DigitScoreReader(nn.Module):
    """The language model's output projection restricted to the digit tokens ``0 .. score_max``."""

    def __init__(self, hidden_size: int, num_digits: int):
        super().__init__()
        self.digit_logits = nn.Linear(hidden_size, num_digits, bias=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.digit_logits(hidden.to(self.digit_logits.weight.dtype))

    @staticmethod
    def expected_scores(logits: torch.Tensor) -> torch.Tensor:
        """(..., D) digit logits -> (...) expected digit / (D - 1), in [0, 1]."""
        probs = torch.softmax(logits.float(), dim=-1)
        values = torch.arange(logits.shape[-1], device=logits.device, dtype=probs.dtype) / (logits.shape[-1] - 1)
        return (probs * values).sum(-1)


def append_tokens(batch: dict, tokens: torch.Tensor) -> dict:
    """The batch with ``tokens`` (B, n) appended to every row; per-token inputs are extended to match."""
    mask = batch.get("attention_mask")
    if mask is not None and not bool(mask[:, -1].all()):
        raise ValueError("the score head 'lm_digits' needs left-padded batches (config.padding_side='left')")
    out = dict(batch)
    out["input_ids"] = torch.cat([batch["input_ids"], tokens.to(batch["input_ids"].device)], dim=1)
    for key, fill in _PER_TOKEN_FILL.items():
        if batch.get(key) is not None:
            out[key] = torch.cat([batch[key], batch[key].new_full(tokens.shape, fill)], dim=1)
    return out


def teacher_forced_digit_logits(run: Callable[[dict], torch.Tensor], batch: dict, prefixes: Sequence[Sequence[int]],
                                digit_ids: Sequence[int], answer_digits: torch.Tensor,
                                reader: DigitScoreReader) -> tuple[torch.Tensor, torch.Tensor]:
    """One pass over prompt + the answer with ``answer_digits`` (B, K) written in.

    ``run(batch)`` returns the backbone's last hidden states (B, L, H). Returns the digit logits (B, K, D) and
    the hidden states they were read from (B, K, H).
    """
    device = batch["input_ids"].device
    digit_tokens = torch.as_tensor(list(digit_ids), device=device)[answer_digits.to(device).long()]
    pieces, offsets, length = [], [], 0
    for k, prefix in enumerate(prefixes):
        pieces += [torch.as_tensor(list(prefix), device=device).expand(len(digit_tokens), -1), digit_tokens[:, k:k + 1]]
        length += len(prefix)
        offsets.append(length - 1)  # the last prefix token predicts the digit
        length += 1
    start = batch["input_ids"].shape[1]
    hidden = run(append_tokens(batch, torch.cat(pieces, dim=1)))
    read = hidden[:, [start + offset for offset in offsets]]
    return reader(read), read


def greedy_digit_logits(run: Callable[[dict], torch.Tensor], batch: dict, prefixes: Sequence[Sequence[int]],
                        digit_ids: Sequence[int], reader: DigitScoreReader) -> tuple[torch.Tensor, torch.Tensor]:
    """K passes: each reads one dimension after the model's own greedy digits for the earlier ones.

    Returns the digit logits (B, K, D) and the hidden states they were read from (B, K, H).
    """
    input_ids = batch["input_ids"]
    digit_tokens = torch.as_tensor(list(digit_ids), device=input_ids.device)
    answer = input_ids.new_zeros((input_ids.shape[0], 0))
    logits, read = [], []
    for k, prefix in enumerate(prefixes):
        answer = torch.cat([answer, input_ids.new_tensor(list(prefix)).expand(len(answer), -1)], dim=1)
        hidden = run(append_tokens(batch, answer))[:, -1]
        read.append(hidden)
        logits.append(reader(hidden))
        if k + 1 < len(prefixes):
            answer = torch.cat([answer, digit_tokens[logits[-1].argmax(-1)][:, None]], dim=1)
    return torch.stack(logits, dim=1), torch.stack(read, dim=1)


def answer_digits_of(labels: torch.Tensor, score_max: int) -> torch.Tensor:
    """Labels in [0, 1] (B, K) -> the digits written in the teacher-forced answer (rounded onto 0..score_max)."""
    return torch.round(labels.clamp(0, 1) * int(score_max)).long()


__all__ = ["DigitScoreReader", "answer_digits_of", "answer_format", "answer_prefixes", "append_tokens",
           "greedy_digit_logits", "teacher_forced_digit_logits", "tokenize_answer"]
