import torch


def bias_corrected_step(grad, m, v, step, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
    """One Adam update of a parameter from its gradient; returns (delta, m, v)."""
    # <paper2code name="moments">
    m = betas[0] * m + (1 - betas[0]) * grad
    v = betas[1] * v + (1 - betas[1]) * grad * grad
    # </paper2code name="moments">
    # <paper2code name="bias correction">
    m_hat = m / (1 - betas[0] ** step)
    v_hat = v / (1 - betas[1] ** step)
    # </paper2code name="bias correction">
    # <paper2code name="update">
    delta = -lr * m_hat / (torch.sqrt(v_hat) + eps)
    # </paper2code name="update">
    return delta, m, v
