"""Reference copy of focal_loss.py (tags removed); the test compares against it.

Part of the ResearchCodeBench Hub demo problem set. Every function works in
float64 and avoids overflow for large positive or negative logits.
"""
import numpy as np


def sigmoid(x):
    """Logistic function, evaluated without overflow for any float input."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    exp_x = np.exp(x[~pos])
    out[~pos] = exp_x / (1.0 + exp_x)
    return out


def binary_cross_entropy_with_logits(logits, targets):
    """Element-wise -[y log p + (1 - y) log(1 - p)] with p = sigmoid(logits)."""
    return np.maximum(logits, 0.0) - logits * targets + np.log1p(np.exp(-np.abs(logits)))


def sigmoid_focal_loss(logits, targets, alpha=0.25, gamma=2.0, reduction="none"):
    """alpha_t * (1 - p_t) ** gamma * CE(p_t), element-wise, then reduced.

    targets hold 0/1 labels (or soft labels in [0, 1]); a negative alpha turns
    the alpha balancing off. reduction is "none", "mean" or "sum".
    """
    logits = np.asarray(logits, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    p = sigmoid(logits)
    ce = binary_cross_entropy_with_logits(logits, targets)
    p_t = p * targets + (1.0 - p) * (1.0 - targets)
    loss = ce * (1.0 - p_t) ** gamma
    if alpha >= 0:
        alpha_t = alpha * targets + (1.0 - alpha) * (1.0 - targets)
        loss = alpha_t * loss
    if reduction == "mean":
        loss = loss.mean()
    elif reduction == "sum":
        loss = loss.sum()
    elif reduction != "none":
        raise ValueError(f"unknown reduction {reduction!r}")
    return loss


def retinanet_classification_loss(logits, labels, alpha=0.25, gamma=2.0):
    """Classification loss of RetinaNet for one image.

    logits: (num_anchors, num_classes) raw scores.
    labels: (num_anchors,) integers; -1 = ignored anchor, 0 = background,
    k >= 1 = object of class k (column k - 1 of logits).
    The focal loss is summed over all non-ignored anchors and classes and
    divided by the number of positive anchors (at least 1).
    """
    num_classes = logits.shape[1]
    valid = labels >= 0
    positive = labels > 0
    targets = np.zeros((labels.shape[0], num_classes))
    targets[positive, labels[positive] - 1] = 1.0
    total = sigmoid_focal_loss(logits[valid], targets[valid], alpha, gamma, reduction="sum")
    num_positive = max(1, int(positive.sum()))
    return total / num_positive


def prior_bias(num_classes, prior=0.01):
    """Bias of the final classification layer so that every anchor starts with
    foreground probability `prior`: b = -log((1 - prior) / prior)."""
    return np.full(num_classes, -np.log((1.0 - prior) / prior))


def softmax_focal_loss(logits, labels, gamma=2.0):
    """Multi-class focal loss -(1 - p_t) ** gamma * log p_t, one value per row.

    logits: (n, num_classes); labels: (n,) integer classes.
    """
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    log_p_t = np.take_along_axis(log_probs, labels[:, None], axis=-1)[:, 0]
    p_t = np.exp(log_p_t)
    return -((1.0 - p_t) ** gamma) * log_p_t
