"""Checks min_p.py against the reference copy min_p_ref.py."""
import unittest

import numpy as np

import min_p
import min_p_ref
from generation import generate, random_bigram_model

RTOL = 1e-12
ATOL = 1e-14


class TestMinP(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(2407)

    def assertClose(self, actual, expected):
        self.assertIsNotNone(actual)
        actual = np.asarray(actual)
        expected = np.asarray(expected)
        self.assertEqual(actual.shape, expected.shape)
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)

    def test_softmax(self):
        logits = self.rng.normal(scale=4.0, size=(5, 30))
        logits[0, :3] = -np.inf
        for temperature in (1.0, 0.5, 2.5):
            self.assertClose(min_p.softmax(logits, temperature), min_p_ref.softmax(logits, temperature))
        self.assertClose(min_p.softmax(logits[1]), min_p_ref.softmax(logits[1]))

    def test_min_p_filter(self):
        probs = min_p_ref.softmax(self.rng.normal(scale=2.0, size=(6, 40)))
        for p_base in (0.0, 0.05, 0.1, 0.3, 1.0):
            got = min_p.min_p_filter(probs, p_base)
            self.assertClose(got, min_p_ref.min_p_filter(probs, p_base))
        # A token exactly at the threshold survives.
        edge = np.array([0.5, 0.25, 0.15, 0.1])
        self.assertClose(min_p.min_p_filter(edge, 0.2), min_p_ref.min_p_filter(edge, 0.2))

    def test_top_p_filter(self):
        probs = min_p_ref.softmax(self.rng.normal(scale=2.0, size=(6, 25)))
        for top_p in (0.1, 0.5, 0.9, 1.0):
            self.assertClose(min_p.top_p_filter(probs, top_p), min_p_ref.top_p_filter(probs, top_p))

    def test_sampling_probabilities_and_tokens(self):
        logits = self.rng.normal(scale=3.0, size=(64, 50))
        u = self.rng.random(64)
        for temperature in (0.7, 1.0, 3.0):
            for temperature_last in (True, False):
                got_tokens, got_probs = min_p.min_p_sample(logits, 0.1, temperature, temperature_last, u=u)
                want_tokens, want_probs = min_p_ref.min_p_sample(logits, 0.1, temperature, temperature_last, u=u)
                self.assertClose(got_probs, want_probs)
                np.testing.assert_array_equal(got_tokens, want_tokens)

    def test_sampling_with_rng_and_generation(self):
        model = random_bigram_model(20, np.random.default_rng(7))

        def sampler_for(module):
            return lambda logits, rng: module.min_p_sample(logits, 0.05, 1.5, rng=rng)[0]

        got = generate(model, 0, 40, sampler_for(min_p), np.random.default_rng(99))
        want = generate(model, 0, 40, sampler_for(min_p_ref), np.random.default_rng(99))
        self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main()
