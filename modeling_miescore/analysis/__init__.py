"""Analyses of models: attention maps of a generative judge over its input images.

* :mod:`.attention_maps` - the SpatialReward paper's appendix C.1 maps (attention from the generated reasoning
  tokens to each image's tokens, last 5 layers, all heads, 24 x 24 grid) and the sec. 5.4 metrics on them:
  entropy, entropy gap, concentration index, inter-sample stability.
* :mod:`.attention_report` - ``metrics.json``, a Table-5-style table, the maps and overlay pictures.

The command line is ``miescore analyze-attention`` (:mod:`modeling_miescore.cli.analyze_attention`).
"""

from .attention_maps import (SampleAttention, concentration_index, entropy, entropy_gap, extract_attention_maps,
                             inter_sample_stability, pairwise_correlations, resize_to_grid, sample_metrics,
                             source_map)
from .attention_report import attention_metrics, attention_table, write_attention_report, write_overlay

__all__ = ["SampleAttention", "attention_metrics", "attention_table", "concentration_index", "entropy",
           "entropy_gap", "extract_attention_maps", "inter_sample_stability", "pairwise_correlations",
           "resize_to_grid", "sample_metrics", "source_map", "write_attention_report", "write_overlay"]
