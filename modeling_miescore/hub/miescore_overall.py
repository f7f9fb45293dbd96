"""MIEScore's three dimensions and the overall score of an edit from its three dimension scores.

Hub file: imported by the model code inside saved checkpoints, so it depends on numpy only.
"""

from __future__ import annotations

import numpy as np

# MIEScore paper, "Subjective Experiment Setup": the three dimensions (the score head's order), scored on 0-100 like
# the MOS (eq. 1).
DIMENSIONS = ("visual_quality", "instruction_following", "attribute_preservation")
MOS_SCALE = 100.0
# MIEScore paper, eq. 2: S_overall = S_VQ^0.3 * S_IF^0.4 * S_AP^0.3 (instruction following weighted most).
OVERALL_WEIGHTS = (0.3, 0.4, 0.3)


def overall_score(vq, if_, ap, weights=OVERALL_WEIGHTS):
    """Weighted geometric mean ``vq**w0 * if_**w1 * ap**w2``.

    Accepts Python floats, numpy arrays or torch tensors (broadcast together); returns the same kind.
    With weights that sum to 1 the result stays on the input scale (0-100 MOS in, 0-100 out). Negative
    inputs are clipped to 0, where the geometric mean is 0.
    """
    w_vq, w_if, w_ap = (float(w) for w in weights)
    if any(w < 0 for w in (w_vq, w_if, w_ap)):
        raise ValueError(f"overall weights must be non-negative, got {tuple(weights)}")
    if all(hasattr(x, "clamp") for x in (vq, if_, ap)):  # torch tensors, without importing torch here
        return vq.clamp(min=0) ** w_vq * if_.clamp(min=0) ** w_if * ap.clamp(min=0) ** w_ap
    parts = [np.clip(np.asarray(x, dtype=np.float64), 0.0, None) for x in (vq, if_, ap)]
    result = parts[0] ** w_vq * parts[1] ** w_if * parts[2] ** w_ap
    return float(result) if result.ndim == 0 else result
