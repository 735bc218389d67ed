"""Checks swish.py against the reference copy swish_ref.py."""
import unittest

import numpy as np

import swish
import swish_ref


class TestSwish(unittest.TestCase):
    def test_sigmoid(self):
        x = np.linspace(-6, 6, 25)
        np.testing.assert_allclose(swish.sigmoid(x), swish_ref.sigmoid(x), rtol=1e-12)

    def test_swish(self):
        x = np.linspace(-6, 6, 25)
        for beta in (0.5, 1.0, 2.0):
            np.testing.assert_allclose(swish.swish(x, beta), swish_ref.swish(x, beta), rtol=1e-12)


if __name__ == "__main__":
    unittest.main()
