"""Checks adam_step.py against torch.optim.Adam (constructing it imports torch._dynamo)."""
import os
import tempfile
import unittest

import torch

import adam_step


class TestAdamStep(unittest.TestCase):
    def test_matches_torch_adam(self):
        torch.manual_seed(1412)
        param = torch.nn.Parameter(torch.randn(6))
        opt = torch.optim.Adam([param], lr=1e-2)
        mine = param.detach().clone()
        m = torch.zeros(6)
        v = torch.zeros(6)
        for step in range(1, 4):
            grad = torch.sin(param.detach() * step)
            param.grad = grad.clone()
            opt.step()
            delta, m, v = adam_step.bias_corrected_step(grad, m, v, step, lr=1e-2)
            mine = mine + delta
        torch.testing.assert_close(mine, param.detach(), rtol=1e-5, atol=1e-6)

    def test_caches_are_writable(self):
        # what torch._dynamo / inductor create on first use must land in a folder the run owns
        import torch._dynamo  # noqa: F401
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        folder = cache_dir()
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
        with tempfile.NamedTemporaryFile():
            pass


if __name__ == "__main__":
    unittest.main()
