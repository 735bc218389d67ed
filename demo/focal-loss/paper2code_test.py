"""Checks focal_loss.py against the reference copy focal_loss_ref.py."""
import unittest

import numpy as np

import focal_loss
import focal_loss_ref

RTOL = 1e-11
ATOL = 1e-13


class TestFocalLoss(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(1708)

    def assertClose(self, actual, expected):
        self.assertIsNotNone(actual)
        actual = np.asarray(actual)
        expected = np.asarray(expected)
        self.assertEqual(actual.shape, expected.shape)
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)

    def test_sigmoid_is_stable(self):
        x = np.concatenate([self.rng.normal(scale=4.0, size=50), [-800.0, -40.0, 0.0, 40.0, 800.0]])
        with np.errstate(over="raise", invalid="raise"):
            got = focal_loss.sigmoid(x)
        self.assertClose(got, focal_loss_ref.sigmoid(x))

    def test_bce_with_logits(self):
        logits = np.concatenate([self.rng.normal(scale=5.0, size=40), [-900.0, 900.0]])
        targets = self.rng.uniform(size=42)
        with np.errstate(over="raise", invalid="raise"):
            got = focal_loss.binary_cross_entropy_with_logits(logits, targets)
        self.assertClose(got, focal_loss_ref.binary_cross_entropy_with_logits(logits, targets))

    def test_focal_loss_elementwise(self):
        logits = self.rng.normal(scale=3.0, size=(20, 5))
        targets = (self.rng.uniform(size=(20, 5)) < 0.3).astype(float)
        for alpha, gamma in [(0.25, 2.0), (0.75, 0.5), (-1.0, 1.0), (0.5, 0.0)]:
            self.assertClose(focal_loss.sigmoid_focal_loss(logits, targets, alpha, gamma),
                             focal_loss_ref.sigmoid_focal_loss(logits, targets, alpha, gamma))

    def test_focal_loss_soft_targets_and_reductions(self):
        logits = self.rng.normal(scale=2.0, size=(8, 3))
        targets = self.rng.uniform(size=(8, 3))
        for reduction in ("none", "mean", "sum"):
            self.assertClose(focal_loss.sigmoid_focal_loss(logits, targets, 0.4, 1.5, reduction),
                             focal_loss_ref.sigmoid_focal_loss(logits, targets, 0.4, 1.5, reduction))
        with self.assertRaises(ValueError):
            focal_loss.sigmoid_focal_loss(logits, targets, reduction="max")

    def test_focal_loss_downweights_easy_examples(self):
        # gamma = 0 and alpha off gives plain cross-entropy.
        logits = self.rng.normal(size=30)
        targets = (self.rng.uniform(size=30) < 0.5).astype(float)
        self.assertClose(focal_loss.sigmoid_focal_loss(logits, targets, alpha=-1, gamma=0.0),
                         focal_loss_ref.binary_cross_entropy_with_logits(logits, targets))

    def test_retinanet_loss(self):
        logits = self.rng.normal(scale=2.0, size=(40, 4))
        labels = self.rng.integers(-1, 5, size=40)
        self.assertClose(focal_loss.retinanet_classification_loss(logits, labels),
                         focal_loss_ref.retinanet_classification_loss(logits, labels))
        self.assertClose(focal_loss.retinanet_classification_loss(logits, labels, 0.5, 1.0),
                         focal_loss_ref.retinanet_classification_loss(logits, labels, 0.5, 1.0))
        background_only = np.where(labels > 0, 0, labels)
        self.assertClose(focal_loss.retinanet_classification_loss(logits, background_only),
                         focal_loss_ref.retinanet_classification_loss(logits, background_only))

    def test_prior_bias(self):
        for classes, prior in [(80, 0.01), (3, 0.2)]:
            bias = focal_loss.prior_bias(classes, prior)
            self.assertClose(bias, focal_loss_ref.prior_bias(classes, prior))
        self.assertClose(focal_loss.prior_bias(5), focal_loss_ref.prior_bias(5))

    def test_softmax_focal_loss(self):
        logits = self.rng.normal(scale=3.0, size=(25, 6))
        labels = self.rng.integers(0, 6, size=25)
        for gamma in (0.0, 2.0, 3.5):
            self.assertClose(focal_loss.softmax_focal_loss(logits, labels, gamma),
                             focal_loss_ref.softmax_focal_loss(logits, labels, gamma))


if __name__ == "__main__":
    unittest.main()
