"""Reference copy of glu.py used by the test."""
import torch
import torch.nn.functional as F
from torch import nn


def swish(x, beta=1.0):
    return x * torch.sigmoid(beta * x)


class SwiGLUFeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w = nn.Linear(dim, hidden, bias=False)
        self.v = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w2(swish(self.w(x)) * self.v(x))


def geglu(x, w, v):
    return F.gelu(x @ w) * (x @ v)
