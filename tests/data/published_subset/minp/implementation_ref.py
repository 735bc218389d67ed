import numpy as np


def _softmax(logits):
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def min_p_filter(logits, min_p, min_tokens_to_keep=1):
    # <paper2code name="min-p sampling">
    # <paper2code name="convert logits to probabilities">
    probs = _softmax(logits)
    # </paper2code name="convert logits to probabilities">
    # <paper2code name="find maximum probability token">
    top_prob = probs.max(axis=-1, keepdims=True)
    # </paper2code name="find maximum probability token">
    # <paper2code name="scale min_p threshold">
    threshold = min_p * top_prob
    # </paper2code name="scale min_p threshold">
    # <paper2code name="identify tokens to remove">
    remove = probs < threshold
    # </paper2code name="identify tokens to remove">
    # <paper2code name="ensure minimum tokens are kept">
    order = np.argsort(-probs, axis=-1)
    keep = order[..., :min_tokens_to_keep]
    np.put_along_axis(remove, keep, False, axis=-1)
    # </paper2code name="ensure minimum tokens are kept">
    # <paper2code name="apply filter to scores">
    scores = np.where(remove, -np.inf, logits)
    return scores
    # </paper2code name="apply filter to scores">
    # </paper2code name="min-p sampling">
