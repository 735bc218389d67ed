"""Reference copy of min_p.py (tags removed); the test compares against it.

Part of the ResearchCodeBench Hub demo problem set. Distributions live on the
last axis, so every function accepts a single row of logits or a batch.
"""
import numpy as np


def softmax(logits, temperature=1.0):
    """Softmax of logits / temperature along the last axis (entries of -inf get 0)."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    scaled = scaled - scaled.max(axis=-1, keepdims=True)
    exp = np.exp(scaled)
    return exp / exp.sum(axis=-1, keepdims=True)


def min_p_filter(probs, p_base):
    """Keep tokens whose probability is at least p_base times the largest
    probability of their row, zero the others and renormalise."""
    p_max = probs.max(axis=-1, keepdims=True)
    threshold = p_base * p_max
    keep = probs >= threshold
    filtered = np.where(keep, probs, 0.0)
    return filtered / filtered.sum(axis=-1, keepdims=True)


def top_p_filter(probs, top_p):
    """Nucleus baseline: keep the smallest set of most likely tokens whose total
    probability reaches top_p (the token that crosses top_p is kept), renormalise."""
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_probs = np.take_along_axis(probs, order, axis=-1)
    cumulative = np.cumsum(sorted_probs, axis=-1)
    sorted_keep = (cumulative - sorted_probs) < top_p
    keep = np.zeros_like(sorted_keep)
    np.put_along_axis(keep, order, sorted_keep, axis=-1)
    filtered = np.where(keep, probs, 0.0)
    return filtered / filtered.sum(axis=-1, keepdims=True)


def min_p_sample(logits, p_base, temperature=1.0, temperature_last=True, u=None, rng=None):
    """Sample token ids with min-p truncation.

    temperature_last=True: the min-p set is chosen from the untempered
    distribution and temperature is applied to the surviving logits only;
    otherwise temperature is applied first and min-p filters the tempered
    distribution. `u` holds uniform numbers in [0, 1), one per row (drawn from
    `rng` when not given); the token is found by inverting the CDF.
    Returns (token ids, final probabilities).
    """
    logits = np.asarray(logits, dtype=np.float64)
    if temperature_last:
        keep = min_p_filter(softmax(logits), p_base) > 0
        masked = np.where(keep, logits, -np.inf)
        probs = softmax(masked, temperature)
    else:
        probs = min_p_filter(softmax(logits, temperature), p_base)
    if u is None:
        u = rng.random(probs.shape[:-1])
    cdf = np.cumsum(probs, axis=-1)
    scaled_u = np.asarray(u)[..., None] * cdf[..., -1:]
    tokens = np.minimum((cdf <= scaled_u).sum(axis=-1), probs.shape[-1] - 1)
    return tokens, probs
