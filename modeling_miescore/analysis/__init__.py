"""Analyses of models: attention maps of a generative judge over its input images (SpatialReward C.1, sec. 5.4);
the command line is ``miescore analyze-attention``."""

from .attention_maps import (SampleAttention, concentration_index, entropy, entropy_gap, extract_attention_maps,
                             inter_sample_stability, pairwise_correlations, resize_to_grid, sample_metrics,
                             source_map)
from .attention_report import attention_metrics, attention_table, write_attention_report, write_overlay

__all__ = ["SampleAttention", "attention_metrics", "attention_table", "concentration_index", "entropy",
           "entropy_gap", "extract_attention_maps", "inter_sample_stability", "pairwise_correlations",
           "resize_to_grid", "sample_metrics", "source_map", "write_attention_report", "write_overlay"]
