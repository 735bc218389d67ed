"""Mish activation in NumPy, with deliberately broken paper2code tags."""
import numpy as np


def softplus(x):
    """log(1 + exp(x)) without overflow."""
    # <paper2code name="stable softplus">
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))
        # </paper2code name="stable softplus">


def mish(x):
    """x * tanh(softplus(x))."""
    # <paper2code name="mish">
    # <paper2code name="tanh of softplus">
    t = np.tanh(softplus(x))
    # </paper2code name="mish">
    return x * t


def mish_derivative(x):
    """d/dx mish(x) = tanh(sp) + x * sigmoid(x) * (1 - tanh(sp) ** 2)."""
    # <paper2code name="mish derivative">
    sp = softplus(x)
    t = np.tanh(sp)
    return t + x * (1.0 / (1.0 + np.exp(-x))) * (1.0 - t * t)
