"""Reference copy of partial.py (tags removed)."""
import math

import numpy as np


def partial_rms_norm(x, gain, p=0.0625, eps=1e-8):
    """RMSNorm whose RMS is estimated from the first ceil(p * n) features only."""
    n = x.shape[-1]
    k = max(1, int(math.ceil(n * p)))
    head = x[..., :k]
    scale = np.sqrt(np.mean(head * head, axis=-1, keepdims=True) + eps)
    return x / scale * gain
