import numpy as np


def proposed_init(n_in, n_out):
    # <paper2code name="proposed weight initialization">
    w = np.zeros((n_in, n_out))
    # <paper2code name="identity_matrix">
    if n_in <= n_out:
        k = n_out // n_in
        for i in range(n_in):
            start = i * k
            stop = start + k
            w[i, start:stop] = 1.0 / k
        w = w.astype(np.float64)
    # </paper2code name="identity_matrix">
    # <paper2code name="identity_matrix_else">
    if n_in > n_out:
        for j in range(n_out):
            w[j::n_out, j] = 1.0
        w = w / np.maximum(w.sum(axis=0, keepdims=True), 1.0)
    # </paper2code name="identity_matrix_else">
    # </paper2code name="proposed weight initialization">
    return w


def update(w, grad, lr):
    # <paper2code name="update">
    step = lr * grad
    w = w - step
    norm = np.linalg.norm(w)
    return w, norm
    # </paper2code name="update">
