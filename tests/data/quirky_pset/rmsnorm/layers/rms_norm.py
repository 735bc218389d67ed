"""RMSNorm in NumPy (quirky test problem set)."""
import numpy as np


def rms(x, eps=1e-8):
    """Root mean square over the last axis, keepdims, with eps inside the root."""
    # <paper2code name="root mean square">
    return np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    # </paper2code name="root mean square">


def rms_norm(x, gain, bias=None, eps=1e-8):
    """x / RMS(x) * gain (+ bias)."""
    # <paper2code name="rms norm">
    out = x / rms(x, eps) * gain
    if bias is not None:
        # <paper2code name="optional bias">
        out = out + bias
        # </paper2code name="optional bias">
    return out
    # </paper2code name="rms norm">
