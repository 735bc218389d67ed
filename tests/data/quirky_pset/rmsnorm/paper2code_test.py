"""Checks layers/rms_norm.py and partial.py against their reference copies.

The inputs come from data/inputs.npy, loaded relative to this folder.
"""
import unittest

import numpy as np

import partial
import partial_ref
import rms_norm_ref
from layers import rms_norm


class TestRMSNorm(unittest.TestCase):
    def setUp(self):
        self.x = np.load("data/inputs.npy")
        rng = np.random.default_rng(7)
        self.gain = rng.normal(size=self.x.shape[-1])
        self.bias = rng.normal(size=self.x.shape[-1])

    def assertClose(self, actual, expected):
        self.assertIsNotNone(actual)
        np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12)

    def test_rms(self):
        self.assertClose(rms_norm.rms(self.x), rms_norm_ref.rms(self.x))
        self.assertClose(rms_norm.rms(self.x, 0.5), rms_norm_ref.rms(self.x, 0.5))

    def test_rms_norm(self):
        self.assertClose(rms_norm.rms_norm(self.x, self.gain), rms_norm_ref.rms_norm(self.x, self.gain))
        self.assertClose(rms_norm.rms_norm(self.x, self.gain, self.bias),
                         rms_norm_ref.rms_norm(self.x, self.gain, self.bias))

    def test_partial(self):
        for p in (0.0625, 0.25, 1.0, 0.001):
            self.assertClose(partial.partial_rms_norm(self.x, self.gain, p),
                             partial_ref.partial_rms_norm(self.x, self.gain, p))


if __name__ == "__main__":
    unittest.main()
