"""GELU and its two approximations in NumPy (quirky test problem set)."""
import numpy as np

from erf_utils import erf


def gelu_exact(x):
    """x * Phi(x) with the standard normal CDF Phi."""
    # <paper2code name="exact gelu">
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))
    # </paper2code name="exact gelu">


def gelu_tanh(x):
    """Tanh approximation of GELU."""
    # <paper2code name="tanh approximation">
    inner = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)
    return 0.5 * x * (1.0 + np.tanh(inner))
    # </paper2code name="tanh approximation">


def gelu_sigmoid(x):
    """Sigmoid approximation x * sigmoid(1.702 x)."""
    # <paper2code name="sigmoid approximation">
    return x / (1.0 + np.exp(-1.702 * x))
    # </paper2code name="sigmoid approximation">
