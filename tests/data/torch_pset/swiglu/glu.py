"""GLU variants of the Transformer feed-forward layer (Shazeer, 2020)."""
import torch
import torch.nn.functional as F
from torch import nn


def swish(x, beta=1.0):
    # <paper2code name="swish">
    return x * torch.sigmoid(beta * x)
    # </paper2code name="swish">


class SwiGLUFeedForward(nn.Module):
    """FFN_SwiGLU(x) = (Swish(x W) * (x V)) W2, all without bias."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.w = nn.Linear(dim, hidden, bias=False)
        self.v = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        # <paper2code name="swiglu forward">
        gate = swish(self.w(x))
        return self.w2(gate * self.v(x))
        # </paper2code name="swiglu forward">


def geglu(x, w, v):
    """GEGLU(x, W, V) = GELU(x W) * (x V)."""
    # <paper2code name="geglu">
    return F.gelu(x @ w) * (x @ v)
    # </paper2code name="geglu">
