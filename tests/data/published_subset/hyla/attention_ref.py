import numpy as np


def rms_head(x, eps=1e-6):
    # <paper2code name="rms_head">
    scale = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x / scale
    # </paper2code name="rms_head">


def mlp_relu(x, w1, w2):
    # <paper2code name="mlp_relu">
    h = x @ w1
    h = np.maximum(h, 0.0)
    out = h @ w2
    return out
    # </paper2code name="mlp_relu">


def mlp_linear(x, w1, w2):
    # <paper2code name="mlp_linear">
    h = x @ w1
    out = h @ w2
    return out
    # </paper2code name="mlp_linear">
