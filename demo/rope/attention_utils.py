"""Small attention helpers shared by the RoPE demo (context file, not annotated)."""
import numpy as np


def softmax(scores, axis=-1):
    """Softmax along `axis` that tolerates rows containing -inf."""
    shifted = scores - np.max(scores, axis=axis, keepdims=True)
    exp = np.exp(shifted)
    return exp / np.sum(exp, axis=axis, keepdims=True)


def causal_mask(seq_len):
    """Boolean (seq_len, seq_len) matrix, True where query i may attend to key j (j <= i)."""
    return np.tril(np.ones((seq_len, seq_len), dtype=bool))


def elu(x, alpha=1.0):
    """Exponential linear unit, used as the feature map of linear attention."""
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))
