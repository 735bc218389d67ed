"""Checks glu.py against glu_ref.py on seeded random inputs."""
import unittest

import torch

import glu
import glu_ref


class TestGLU(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(2002)

    def test_swish(self):
        x = torch.randn(50)
        for beta in (1.0, 0.5, 2.0):
            torch.testing.assert_close(glu.swish(x, beta), glu_ref.swish(x, beta))

    def test_swiglu_forward(self):
        mine = glu.SwiGLUFeedForward(6, 10)
        ref = glu_ref.SwiGLUFeedForward(6, 10)
        ref.load_state_dict(mine.state_dict())
        x = torch.randn(3, 4, 6)
        torch.testing.assert_close(mine(x), ref(x))

    def test_geglu(self):
        x, w, v = torch.randn(5, 4), torch.randn(4, 7), torch.randn(4, 7)
        torch.testing.assert_close(glu.geglu(x, w, v), glu_ref.geglu(x, w, v))


if __name__ == "__main__":
    unittest.main()
