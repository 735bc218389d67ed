"""Checks mish.py against the reference copy mish_ref.py."""
import unittest

import numpy as np

import mish
import mish_ref


class TestMish(unittest.TestCase):
    def test_against_reference(self):
        x = np.concatenate([np.random.default_rng(1908).normal(scale=3.0, size=40), [-750.0, 750.0]])
        with np.errstate(over="raise"):
            np.testing.assert_allclose(mish.softplus(x), mish_ref.softplus(x), rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(mish.mish(x), mish_ref.mish(x), rtol=1e-12, atol=1e-14)


if __name__ == "__main__":
    unittest.main()
