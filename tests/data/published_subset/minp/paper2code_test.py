import unittest

import numpy as np

import implementation
import implementation_ref


class TestMinP(unittest.TestCase):
    def test_filter(self):
        rng = np.random.default_rng(2)
        for min_p in (0.05, 0.3, 0.9):
            logits = rng.normal(size=(3, 11)) * 3
            np.testing.assert_array_equal(implementation.min_p_filter(logits, min_p),
                                          implementation_ref.min_p_filter(logits, min_p))

    def test_keeps_at_least_n(self):
        logits = np.array([[5.0, 0.0, 0.0, -1.0]])
        got = implementation.min_p_filter(logits, 0.99, min_tokens_to_keep=2)
        self.assertEqual(int(np.isfinite(got).sum()), 2)


if __name__ == "__main__":
    unittest.main()
