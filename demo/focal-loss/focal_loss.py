"""Focal loss (RetinaNet) with NumPy only.

Part of the ResearchCodeBench Hub demo problem set. Every function works in
float64 and avoids overflow for large positive or negative logits.
"""
import numpy as np


def sigmoid(x):
    """Logistic function, evaluated without overflow for any float input."""
    x = np.asarray(x, dtype=np.float64)
    # <paper2code name="stable sigmoid">
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    exp_x = np.exp(x[~pos])
    out[~pos] = exp_x / (1.0 + exp_x)
    # </paper2code name="stable sigmoid">
    return out


def binary_cross_entropy_with_logits(logits, targets):
    """Element-wise -[y log p + (1 - y) log(1 - p)] with p = sigmoid(logits)."""
    # <paper2code name="bce with logits">
    return np.maximum(logits, 0.0) - logits * targets + np.log1p(np.exp(-np.abs(logits)))
    # </paper2code name="bce with logits">


def sigmoid_focal_loss(logits, targets, alpha=0.25, gamma=2.0, reduction="none"):
    """alpha_t * (1 - p_t) ** gamma * CE(p_t), element-wise, then reduced.

    targets hold 0/1 labels (or soft labels in [0, 1]); a negative alpha turns
    the alpha balancing off. reduction is "none", "mean" or "sum".
    """
    # <paper2code name="sigmoid focal loss">
    logits = np.asarray(logits, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    p = sigmoid(logits)
    ce = binary_cross_entropy_with_logits(logits, targets)
    # <paper2code name="p_t">
    p_t = p * targets + (1.0 - p) * (1.0 - targets)
    # </paper2code name="p_t">
    # <paper2code name="modulating factor">
    loss = ce * (1.0 - p_t) ** gamma
    # </paper2code name="modulating factor">
    if alpha >= 0:
        # <paper2code name="alpha balancing">
        alpha_t = alpha * targets + (1.0 - alpha) * (1.0 - targets)
        loss = alpha_t * loss
        # </paper2code name="alpha balancing">
    # <paper2code name="reduction">
    if reduction == "mean":
        loss = loss.mean()
    elif reduction == "sum":
        loss = loss.sum()
    elif reduction != "none":
        raise ValueError(f"unknown reduction {reduction!r}")
    # </paper2code name="reduction">
    return loss
    # </paper2code name="sigmoid focal loss">


def retinanet_classification_loss(logits, labels, alpha=0.25, gamma=2.0):
    """Classification loss of RetinaNet for one image.

    logits: (num_anchors, num_classes) raw scores.
    labels: (num_anchors,) integers; -1 = ignored anchor, 0 = background,
    k >= 1 = object of class k (column k - 1 of logits).
    The focal loss is summed over all non-ignored anchors and classes and
    divided by the number of positive anchors (at least 1).
    """
    num_classes = logits.shape[1]
    # <paper2code name="retinanet loss">
    # <paper2code name="one hot targets">
    valid = labels >= 0
    positive = labels > 0
    targets = np.zeros((labels.shape[0], num_classes))
    targets[positive, labels[positive] - 1] = 1.0
    # </paper2code name="one hot targets">
    total = sigmoid_focal_loss(logits[valid], targets[valid], alpha, gamma, reduction="sum")
    # <paper2code name="normalise by positives">
    num_positive = max(1, int(positive.sum()))
    return total / num_positive
    # </paper2code name="normalise by positives">
    # </paper2code name="retinanet loss">


def prior_bias(num_classes, prior=0.01):
    """Bias of the final classification layer so that every anchor starts with
    foreground probability `prior`: b = -log((1 - prior) / prior)."""
    # <paper2code name="prior initialisation">
    return np.full(num_classes, -np.log((1.0 - prior) / prior))
    # </paper2code name="prior initialisation">


def softmax_focal_loss(logits, labels, gamma=2.0):
    """Multi-class focal loss -(1 - p_t) ** gamma * log p_t, one value per row.

    logits: (n, num_classes); labels: (n,) integer classes.
    """
    # <paper2code name="softmax focal loss">
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    # <paper2code name="log p_t gather">
    log_p_t = np.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]
    # </paper2code name="log p_t gather">
    p_t = np.exp(log_p_t)
    return -((1.0 - p_t) ** gamma) * log_p_t
    # </paper2code name="softmax focal loss">
