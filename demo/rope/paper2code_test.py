"""Checks rope.py against the reference copy rope_ref.py on seeded random inputs."""
import unittest

import numpy as np

import rope
import rope_ref

RTOL = 1e-10
ATOL = 1e-12


class TestRoPE(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(2104)

    def assertClose(self, actual, expected, rtol=RTOL, atol=ATOL):
        self.assertIsNotNone(actual)
        actual = np.asarray(actual)
        expected = np.asarray(expected)
        self.assertEqual(actual.shape, expected.shape)
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)

    def test_inverse_frequencies(self):
        for dim, base in [(8, 10000.0), (16, 500.0), (2, 10.0)]:
            self.assertClose(rope.rope_inverse_frequencies(dim, base),
                             rope_ref.rope_inverse_frequencies(dim, base))
        with self.assertRaises(ValueError):
            rope.rope_inverse_frequencies(7)

    def test_angles(self):
        positions = self.rng.integers(0, 512, size=11)
        self.assertClose(rope.rope_angles(positions, 12, 1000.0),
                         rope_ref.rope_angles(positions, 12, 1000.0))

    def test_rotate_pairs(self):
        x = self.rng.normal(size=(3, 5, 8))
        self.assertClose(rope.rotate_pairs(x), rope_ref.rotate_pairs(x))

    def test_apply_rope_matches_reference(self):
        x = self.rng.normal(size=(2, 3, 9, 16))
        positions = np.arange(9) + 3
        self.assertClose(rope.apply_rope(x, positions, 100.0),
                         rope_ref.apply_rope(x, positions, 100.0))

    def test_apply_rope_keeps_dtype_and_norm(self):
        x = self.rng.normal(size=(7, 8)).astype(np.float32)
        out = rope.apply_rope(x, np.arange(7))
        self.assertEqual(out.dtype, np.float32)
        self.assertClose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1),
                         rtol=1e-5, atol=1e-6)

    def test_relative_position_property(self):
        # <R_m q, R_n k> only depends on m - n.
        q = self.rng.normal(size=(1, 8))
        k = self.rng.normal(size=(1, 8))
        first = rope.apply_rope(q, [5]) @ rope.apply_rope(k, [2]).T
        second = rope.apply_rope(q, [40]) @ rope.apply_rope(k, [37]).T
        self.assertClose(first, second, rtol=1e-9, atol=1e-9)

    def test_attention_causal_and_full(self):
        q = self.rng.normal(size=(2, 6, 8))
        k = self.rng.normal(size=(2, 6, 8))
        v = self.rng.normal(size=(2, 6, 4))
        for causal in (True, False):
            self.assertClose(rope.rope_attention(q, k, v, causal=causal),
                             rope_ref.rope_attention(q, k, v, causal=causal))
        positions = np.array([0, 2, 4, 6, 8, 10])
        self.assertClose(rope.rope_attention(q, k, v, positions=positions, base=50.0),
                         rope_ref.rope_attention(q, k, v, positions=positions, base=50.0))

    def test_linear_attention(self):
        q = self.rng.normal(size=(3, 10, 8))
        k = self.rng.normal(size=(3, 10, 8))
        v = self.rng.normal(size=(3, 10, 5))
        self.assertClose(rope.rope_linear_attention(q, k, v),
                         rope_ref.rope_linear_attention(q, k, v))
        positions = np.arange(10) * 3
        self.assertClose(rope.rope_linear_attention(q, k, v, positions=positions, base=20.0),
                         rope_ref.rope_linear_attention(q, k, v, positions=positions, base=20.0))


if __name__ == "__main__":
    unittest.main()
