"""Mish activation in NumPy (quirky test problem set)."""
import numpy as np


def softplus(x):
    """log(1 + exp(x)) without overflow."""
    # <paper2code name="stable softplus">
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))
    # </paper2code name="stable softplus">


def mish(x):
    """x * tanh(softplus(x))."""
    # <paper2code name="mish">
    return x * np.tanh(softplus(x))
    # </paper2code name="mish">
