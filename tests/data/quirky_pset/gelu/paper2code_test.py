"""Checks gelu.py against fixtures.json (read relative to this folder) and gelu_ref.py."""
import json
import unittest

import numpy as np

import gelu
import gelu_ref


class TestGELU(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open("fixtures.json", encoding="utf-8") as fh:
            cls.fixtures = json.load(fh)

    def test_fixtures(self):
        x = np.array(self.fixtures["x"])
        for name in ("gelu_exact", "gelu_tanh", "gelu_sigmoid"):
            got = getattr(gelu, name)(x)
            self.assertIsNotNone(got)
            np.testing.assert_allclose(got, self.fixtures[name], rtol=1e-12, atol=1e-14)

    def test_random(self):
        x = np.random.default_rng(1606).normal(scale=2.0, size=(5, 7))
        for name in ("gelu_exact", "gelu_tanh", "gelu_sigmoid"):
            np.testing.assert_allclose(getattr(gelu, name)(x), getattr(gelu_ref, name)(x),
                                       rtol=1e-12, atol=1e-14)


if __name__ == "__main__":
    unittest.main()
