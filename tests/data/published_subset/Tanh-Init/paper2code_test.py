import unittest

import numpy as np

import model
import model_ref


class TestInit(unittest.TestCase):
    def test_wide(self):
        np.testing.assert_allclose(model.proposed_init(3, 7), model_ref.proposed_init(3, 7))

    def test_narrow(self):
        np.testing.assert_allclose(model.proposed_init(9, 4), model_ref.proposed_init(9, 4))

    def test_update(self):
        rng = np.random.default_rng(1)
        w, g = rng.normal(size=(5, 5)), rng.normal(size=(5, 5))
        got, ref = model.update(w, g, 0.1), model_ref.update(w, g, 0.1)
        np.testing.assert_allclose(got[0], ref[0])
        self.assertAlmostEqual(got[1], ref[1])


if __name__ == "__main__":
    unittest.main()
