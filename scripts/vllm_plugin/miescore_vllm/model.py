"""MIEScore on vLLM's pooling runner: vLLM's own Qwen3-VL (vision tower, deepstack, M-RoPE, paged attention, prefix
caching) with the package's regression head on the last prompt token, ``hidden -> head_hidden_size -> 3``
(``modeling_miescore.hub.miescore_score_heads.RegressionScoreHead``: dense, GELU, out_proj; the sigmoid and the
0-100 scale are applied by the client, which asks for the raw outputs with ``use_activation: false``).

The checkpoint is the export of ``miescore export-vllm``: the backbone's tensors renamed to Qwen3-VL's
(``backbone.`` -> ``model.``) and the head's to ``score.``; ``num_labels`` and ``head_hidden_size`` in its config."""

from __future__ import annotations

import torch
from torch import nn
from vllm.model_executor.layers.pooler import DispatchPooler
from vllm.model_executor.models.adapters import as_seq_cls_model
from vllm.model_executor.models.qwen3_vl import Qwen3VLForConditionalGeneration


class MIEScoreHead(nn.Module):
    """``modeling_miescore.hub.miescore_score_heads.RegressionScoreHead`` without its dropout (inference)."""

    def __init__(self, hidden_size: int, head_hidden_size: int, num_scores: int, dtype: torch.dtype):
        super().__init__()
        self.dense = nn.Linear(hidden_size, head_hidden_size, dtype=dtype)
        self.out_proj = nn.Linear(head_hidden_size, num_scores, dtype=dtype)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out_proj(nn.functional.gelu(self.dense(hidden.to(self.dense.weight.dtype))))


class MIEScoreForImageScoring(as_seq_cls_model(Qwen3VLForConditionalGeneration)):
    def _init_pooler(self, vllm_config, prefix: str = ""):
        config = vllm_config.model_config.hf_config
        self.score = MIEScoreHead(config.get_text_config().hidden_size, int(config.head_hidden_size),
                                  int(config.num_labels), vllm_config.model_config.head_dtype)
        return DispatchPooler.for_seq_cls(vllm_config.model_config.pooler_config, classifier=self.score)
