"""Checks dyt.py against dyt_ref.py on seeded random inputs."""
import unittest

import torch
from torch import nn

import dyt
import dyt_ref


class TestDyT(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(2503)

    def test_parameters(self):
        mine, ref = dyt.DyT(6, alpha_init_value=0.8), dyt_ref.DyT(6, alpha_init_value=0.8)
        self.assertEqual(sorted(n for n, _ in mine.named_parameters()), sorted(n for n, _ in ref.named_parameters()))
        for (name, p), (_, q) in zip(sorted(mine.named_parameters()), sorted(ref.named_parameters())):
            self.assertEqual(p.shape, q.shape, name)
            torch.testing.assert_close(p, q)

    def test_forward(self):
        mine, ref = dyt.DyT(8), dyt_ref.DyT(8)
        with torch.no_grad():
            for module in (mine, ref):
                module.alpha.fill_(1.3)
                module.weight.copy_(torch.linspace(-1, 1, 8))
                module.bias.copy_(torch.linspace(0, 0.5, 8))
        x = torch.randn(4, 5, 8)
        torch.testing.assert_close(mine(x), ref(x))

    def test_gradients(self):
        mine, ref = dyt.DyT(3), dyt_ref.DyT(3)
        x = torch.randn(7, 3)
        mine(x).pow(2).sum().backward()
        ref(x).pow(2).sum().backward()
        torch.testing.assert_close(mine.alpha.grad, ref.alpha.grad)

    def test_replace_layernorm(self):
        def model():
            return nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Sequential(nn.GELU(), nn.LayerNorm(4)))

        mine, ref = dyt.replace_layernorm(model()), dyt_ref.replace_layernorm(model())
        self.assertEqual([type(m).__name__ for m in mine.modules()], [type(m).__name__ for m in ref.modules()])
        self.assertFalse(any(isinstance(m, nn.LayerNorm) for m in mine.modules()))


if __name__ == "__main__":
    unittest.main()
