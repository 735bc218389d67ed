"""Reference copy of gelu.py (tags removed)."""
import numpy as np

from erf_utils import erf


def gelu_exact(x):
    """x * Phi(x) with the standard normal CDF Phi."""
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def gelu_tanh(x):
    """Tanh approximation of GELU."""
    inner = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)
    return 0.5 * x * (1.0 + np.tanh(inner))


def gelu_sigmoid(x):
    """Sigmoid approximation x * sigmoid(1.702 x)."""
    return x / (1.0 + np.exp(-1.702 * x))
