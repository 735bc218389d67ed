"""Reference copy of rope.py (tags removed); the test compares against it.

Part of the ResearchCodeBench Hub demo problem set. Arrays are laid out as
(..., seq_len, dim); the feature axis is split into consecutive pairs
(x_0, x_1), (x_2, x_3), ... and pair i is rotated by the angle m * theta_i,
where m is the token position.
"""
import numpy as np

from attention_utils import causal_mask, elu, softmax


def rope_inverse_frequencies(dim, base=10000.0):
    """Return theta_i = base ** (-2 i / dim) for i = 0 .. dim / 2 - 1."""
    if dim % 2 != 0:
        raise ValueError("RoPE needs an even feature dimension")
    exponents = np.arange(0, dim, 2, dtype=np.float64) / dim
    inv_freq = 1.0 / (base ** exponents)
    return inv_freq


def rope_angles(positions, dim, base=10000.0):
    """Return the angle table m * theta_i with shape (len(positions), dim // 2)."""
    inv_freq = rope_inverse_frequencies(dim, base)
    positions = np.asarray(positions, dtype=np.float64)
    angles = np.outer(positions, inv_freq)
    return angles


def rotate_pairs(x):
    """Map every pair (x_2i, x_2i+1) of the last axis to (-x_2i+1, x_2i)."""
    out = np.empty_like(x)
    out[..., 0::2] = -x[..., 1::2]
    out[..., 1::2] = x[..., 0::2]
    return out


def apply_rope(x, positions, base=10000.0):
    """Rotate x of shape (..., seq_len, dim) by its position-dependent angles.

    Computes x * cos(m theta) + rotate_pairs(x) * sin(m theta), the sparse form
    of multiplying each token by the block-diagonal rotation matrix R_m.
    The result keeps the dtype of x.
    """
    dim = x.shape[-1]
    angles = rope_angles(positions, dim, base)
    angles = np.repeat(angles, 2, axis=-1)
    cos, sin = np.cos(angles), np.sin(angles)
    rotated = x * cos + rotate_pairs(x) * sin
    return rotated.astype(x.dtype, copy=False)


def rope_attention(q, k, v, positions=None, causal=True, base=10000.0):
    """Softmax attention where queries and keys carry rotary position information.

    q, k, v have shape (..., seq_len, dim). Returns (..., seq_len, dim_v).
    """
    seq_len = q.shape[-2]
    if positions is None:
        positions = np.arange(seq_len)
    q_rot = apply_rope(q, positions, base)
    k_rot = apply_rope(k, positions, base)
    scores = q_rot @ np.swapaxes(k_rot, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        scores = np.where(causal_mask(seq_len), scores, -np.inf)
    weights = softmax(scores, axis=-1)
    return weights @ v


def rope_linear_attention(q, k, v, positions=None, base=10000.0, eps=1e-6):
    """Non-causal linear attention with RoPE (RoFormer, Section 3.3).

    The feature map is phi(x) = elu(x) + 1. The rotation is applied to the
    features in the numerator only; the normaliser uses the un-rotated
    features so that it stays positive.
    """
    if positions is None:
        positions = np.arange(q.shape[-2])
    phi_q = elu(q) + 1.0
    phi_k = elu(k) + 1.0
    q_rot = apply_rope(phi_q, positions, base)
    k_rot = apply_rope(phi_k, positions, base)
    numerator = q_rot @ (np.swapaxes(k_rot, -1, -2) @ v)
    k_sum = phi_k.sum(axis=-2)[..., :, None]
    denominator = phi_q @ k_sum
    return numerator / (denominator + eps)
