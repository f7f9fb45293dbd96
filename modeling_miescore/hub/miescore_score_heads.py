"""MIEScore's score heads, declared once: :data:`SCORE_HEADS` (``config.score_head`` -> head class).

Each head answers everything the rest of the package asks about it, so no caller branches on the head's name:
building it from the config, scoring a batch, whether shared-prefix reuse applies, its output layer and dtype (what
``miescore doctor`` checks), how a new scorer initialises it from the backbone (``MIEScoreModel.from_backbone``), the
config fields and prompt text it needs, the extra training inputs it reads (the collator), and whether its weights
are new (trained in full beside LoRA; random in a fresh scorer) or the backbone's own.

* ``regression`` (:class:`RegressionScoreHead`): the paper's lightweight MLP S_omega on the hidden state of the last
  non-pad token, ``hidden -> head_hidden_size -> num_scores`` with a sigmoid (MIEScore paper, "Model Architecture",
  eq. 4).
* ``lm_digits`` (:class:`LMDigitsScoreHead`): no head (Table 5 rows 1 and 4): each score is the expected digit the
  language model writes in a JSON answer, read from the rows of its own output layer for the digit tokens
  (:mod:`lm_digit_scores`).

A new head is one class here (a :class:`ScoreHead` subclass) and its entry in :data:`SCORE_HEADS`.

Hub file: copied into checkpoints; imports only torch and its flat sibling ``lm_digit_scores``.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Optional

import torch
from torch import nn

from .lm_digit_scores import (DigitScoreReader, answer_digits_of, answer_format, greedy_digit_logits,
                              teacher_forced_digit_logits, tokenize_answer)

Scored = tuple  # (scores (B, K) in [0, 1], logits, the hidden states they were read from)


def last_token_indices(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last non-pad token of each row of a (B, L) mask, for left or right padding."""
    length = attention_mask.shape[1]
    return length - 1 - attention_mask.flip(1).long().argmax(dim=1)


class ScoreHead(nn.Module):
    """What a MIEScore score head declares and answers (module docstring).

    Class attributes: ``name`` (the ``config.score_head`` value), ``description`` (one line, for ``--help``),
    ``new_weights`` (True: the head's weights are new, randomly initialised in a fresh scorer and trained in full
    beside LoRA; False: they are rows of the backbone's own weights, nothing new is learned),
    ``needs_lm_output_layer`` (``from_backbone`` loads the ``*ForConditionalGeneration`` model for its output
    layer), ``prefix_reuse_unavailable`` (None, or why shared-prefix reuse cannot apply).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    new_weights: ClassVar[bool]
    needs_lm_output_layer: ClassVar[bool] = False
    prefix_reuse_unavailable: ClassVar[Optional[str]] = None

    @classmethod
    def from_config(cls, config, hidden_size: int) -> "ScoreHead":  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def output_layer(self) -> nn.Linear:  # pragma: no cover - abstract
        """The layer whose weights make the outputs (all zeros: every input scores the same)."""
        raise NotImplementedError

    @property
    def dtype(self) -> torch.dtype:
        return self.output_layer.weight.dtype

    def score(self, backbone, inputs: dict, attention_mask: torch.Tensor, config, training: bool,
              answer_digits: Optional[torch.Tensor]) -> Scored:  # pragma: no cover - abstract
        """Scores of a batch (``inputs``: the backbone's keyword inputs, attention mask included)."""
        raise NotImplementedError

    def scores_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, H) hidden states at each prompt's last token -> (B, K) scores in [0, 1] (prefix reuse)."""
        raise NotImplementedError(f"the score head {self.name!r}: {self.prefix_reuse_unavailable}")

    def init_from_backbone(self, output_layer: Optional[nn.Module], config, init_linear: Callable) -> None:
        """Set the weights of a new scorer's head (``init_linear``: the model's random initialisation)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                init_linear(module)

    @classmethod
    def config_fields(cls, processor, output_layer, config_kwargs: dict) -> dict:
        """Config fields a new scorer with this head needs, read from the backbone (``from_backbone``;
        ``config_kwargs``: the new config's fields, defaults filled in)."""
        return {}

    @classmethod
    def prompt_suffix(cls, config) -> str:
        """Text appended to the default prompt templates (the answer format a head-free model must be told)."""
        return ""

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ValueError when ``config`` cannot run this head."""

    @classmethod
    def training_inputs(cls, labels: torch.Tensor, config) -> dict:
        """Extra model inputs of a training batch, from its (B, K) labels in [0, 1] (the collator adds them)."""
        return {}


class RegressionScoreHead(ScoreHead):
    """Lightweight MLP ``hidden -> head_hidden_size -> num_scores`` (the paper's score head S_omega, eq. 4)."""

    name = "regression"
    description = "the paper's MLP head on the last token's hidden state; the default for a new scorer"
    new_weights = True

    def __init__(self, hidden_size: int, head_hidden_size: int, num_scores: int, dropout: float = 0.0):
        super().__init__()
        self.dense = nn.Linear(hidden_size, head_hidden_size)
        self.act = nn.GELU()
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(head_hidden_size, num_scores)

    @classmethod
    def from_config(cls, config, hidden_size: int) -> "RegressionScoreHead":
        return cls(hidden_size, config.head_hidden_size, len(config.score_names), config.head_dropout)

    @property
    def output_layer(self) -> nn.Linear:
        return self.out_proj

    @property
    def dtype(self) -> torch.dtype:
        return self.dense.weight.dtype

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(self.act(self.dense(hidden))))

    def score(self, backbone, inputs, attention_mask, config, training, answer_digits) -> Scored:
        hidden = backbone(**inputs).last_hidden_state
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        pooled = hidden[rows, last_token_indices(attention_mask).to(hidden.device)]
        logits = self(pooled.to(self.dtype))
        return torch.sigmoid(logits), logits, pooled

    def scores_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self(hidden.to(self.dtype)))


class LMDigitsScoreHead(DigitScoreReader, ScoreHead):
    """No head: the language model's output rows of the digit tokens ``0 .. lm_score_max`` (``lm_digit_scores``)."""

    name = "lm_digits"
    description = "no head: the LM's own digit probabilities in a JSON answer (Table 5 rows 1 and 4)"
    new_weights = False
    needs_lm_output_layer = True
    prefix_reuse_unavailable = "the score head 'lm_digits' reads an answer after the whole prompt"

    @classmethod
    def from_config(cls, config, hidden_size: int) -> "LMDigitsScoreHead":
        return cls(hidden_size, int(config.lm_score_max) + 1)

    @property
    def output_layer(self) -> nn.Linear:
        return self.digit_logits

    def score(self, backbone, inputs, attention_mask, config, training, answer_digits) -> Scored:
        if "input_ids" not in inputs or "position_ids" in inputs:
            raise ValueError("score_head='lm_digits' appends the answer to input_ids: pass input_ids and let the "
                             "backbone compute positions")

        def run(batch: dict) -> torch.Tensor:
            return backbone(**batch).last_hidden_state

        prefixes, digits = config.lm_answer_token_ids, config.lm_digit_token_ids
        if training and answer_digits is not None:
            logits, read = teacher_forced_digit_logits(run, inputs, prefixes, digits, answer_digits, self)
        else:
            logits, read = greedy_digit_logits(run, inputs, prefixes, digits, self)
        return self.expected_scores(logits), logits, read

    def init_from_backbone(self, output_layer, config, init_linear) -> None:
        with torch.no_grad():  # the language model's own output rows of the digit tokens
            self.digit_logits.weight.copy_(output_layer.weight[config.lm_digit_token_ids])

    @classmethod
    def config_fields(cls, processor, output_layer, config_kwargs: dict) -> dict:
        if output_layer is None or getattr(output_layer, "bias", None) is not None:
            raise ValueError("score_head='lm_digits' reads the language model's output layer (lm_head, without "
                             "bias): pass the *ForConditionalGeneration model or a checkpoint path, not its base model")
        if processor is None:
            raise ValueError("score_head='lm_digits' needs the backbone's processor (its tokenizer gives the answer "
                             "tokens); pass processor=load_stock_processor(<checkpoint>)")
        prefixes, digits = tokenize_answer(processor.tokenizer, config_kwargs["score_names"],
                                           int(config_kwargs["lm_score_max"]))
        return {"lm_answer_token_ids": prefixes, "lm_digit_token_ids": digits}

    @classmethod
    def prompt_suffix(cls, config) -> str:
        return "\n" + answer_format(config.score_names, config.lm_score_max)

    @classmethod
    def check_config(cls, config) -> None:
        if not 1 <= int(config.lm_score_max) <= 9:
            raise ValueError(f"lm_score_max must be 1..9 (one digit token per score), got {config.lm_score_max}")
        if config.padding_side != "left":
            raise ValueError("score_head='lm_digits' appends the answer to every row: padding_side must be 'left'")
        if not config.lm_answer_token_ids or not config.lm_digit_token_ids:
            raise ValueError("score_head='lm_digits' needs lm_answer_token_ids and lm_digit_token_ids; start the "
                             "scorer with MIEScoreModel.from_backbone(..., score_head='lm_digits'), which reads them "
                             "from the tokenizer")
        if len(config.lm_answer_token_ids) != len(config.score_names) or \
                len(config.lm_digit_token_ids) != int(config.lm_score_max) + 1:
            raise ValueError("lm_answer_token_ids needs one entry per score name and lm_digit_token_ids one per "
                             "digit 0..lm_score_max")

    @classmethod
    def training_inputs(cls, labels: torch.Tensor, config) -> dict:
        return {"answer_digits": answer_digits_of(labels, config.lm_score_max)}


SCORE_HEADS: dict[str, type[ScoreHead]] = {head.name: head for head in (RegressionScoreHead, LMDigitsScoreHead)}


def score_head_class(name: str) -> type[ScoreHead]:
    """The head registered as ``name`` (``config.score_head``); ValueError naming the choices."""
    try:
        return SCORE_HEADS[name]
    except KeyError:
        raise ValueError(f"score_head must be one of {tuple(SCORE_HEADS)}, got {name!r}") from None


__all__ = ["LMDigitsScoreHead", "RegressionScoreHead", "SCORE_HEADS", "ScoreHead", "last_token_indices",
           "score_head_class"]
