import unittest

import numpy as np

import attention
import attention_ref


class TestAttention(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(4, 8))
        self.w1 = rng.normal(size=(8, 16))
        self.w2 = rng.normal(size=(16, 8))

    def test_rms_head(self):
        np.testing.assert_allclose(attention.rms_head(self.x), attention_ref.rms_head(self.x))

    def test_mlp_relu(self):
        np.testing.assert_allclose(attention.mlp_relu(self.x, self.w1, self.w2),
                                   attention_ref.mlp_relu(self.x, self.w1, self.w2))

    def test_mlp_linear(self):
        np.testing.assert_allclose(attention.mlp_linear(self.x, self.w1, self.w2),
                                   attention_ref.mlp_linear(self.x, self.w1, self.w2))


if __name__ == "__main__":
    unittest.main()
