"""Reference copy of layers/rms_norm.py (tags removed)."""
import numpy as np


def rms(x, eps=1e-8):
    """Root mean square over the last axis, keepdims, with eps inside the root."""
    return np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def rms_norm(x, gain, bias=None, eps=1e-8):
    """x / RMS(x) * gain (+ bias)."""
    out = x / rms(x, eps) * gain
    if bias is not None:
        out = out + bias
    return out
