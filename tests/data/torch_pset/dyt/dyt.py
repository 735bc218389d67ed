"""Dynamic Tanh (DyT): a drop-in replacement for LayerNorm, DyT(x) = weight * tanh(alpha * x) + bias."""
import torch
from torch import nn


class DyT(nn.Module):
    def __init__(self, num_features, alpha_init_value=0.5):
        super().__init__()
        # <paper2code name="parameters">
        self.alpha = nn.Parameter(torch.ones(1) * alpha_init_value)
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        # </paper2code name="parameters">

    def forward(self, x):
        # <paper2code name="forward">
        # <paper2code name="squash">
        x = torch.tanh(self.alpha * x)
        # </paper2code name="squash">
        # <paper2code name="affine">
        return x * self.weight + self.bias
        # </paper2code name="affine">
        # </paper2code name="forward">


def replace_layernorm(module):
    """Swap every nn.LayerNorm inside ``module`` for a DyT of the same width."""
    # <paper2code name="replace layernorm">
    for name, child in module.named_children():
        if isinstance(child, nn.LayerNorm):
            setattr(module, name, DyT(child.normalized_shape[-1]))
        else:
            replace_layernorm(child)
    return module
    # </paper2code name="replace layernorm">
