"""Reference copy of mish.py (tags removed)."""
import numpy as np


def softplus(x):
    """log(1 + exp(x)) without overflow."""
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def mish(x):
    """x * tanh(softplus(x))."""
    return x * np.tanh(softplus(x))
