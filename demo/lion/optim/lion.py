"""Lion (EvoLved Sign Momentum) optimiser for dictionaries of NumPy arrays.

Part of the ResearchCodeBench Hub demo problem set. Parameters are updated in
place; the optimiser keeps a single momentum buffer per parameter.
"""
import numpy as np


class Lion:
    """Sign-momentum optimiser with decoupled weight decay.

    params: dict mapping a name to a float ndarray (updated in place).
    betas: (beta1, beta2); beta1 interpolates the update direction, beta2
    is the decay of the tracked momentum.
    """

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        if lr <= 0.0:
            raise ValueError(f"invalid learning rate {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas {betas}")
        self.params = params
        self.lr = lr
        self.beta1, self.beta2 = betas
        self.weight_decay = weight_decay
        self.step_count = 0
        # <paper2code name="init state">
        self.state = {name: {"exp_avg": np.zeros_like(p)} for name, p in params.items()}
        # </paper2code name="init state">

    def step(self, grads, lr=None):
        """Apply one update given a dict of gradients with the same keys as params."""
        lr = self.lr if lr is None else lr
        # <paper2code name="lion step">
        for name, p in self.params.items():
            g = grads[name]
            m = self.state[name]["exp_avg"]
            # <paper2code name="decoupled weight decay">
            p *= 1.0 - lr * self.weight_decay
            # </paper2code name="decoupled weight decay">
            # <paper2code name="update direction">
            # <paper2code name="interpolation">
            c = self.beta1 * m + (1.0 - self.beta1) * g
            # </paper2code name="interpolation">
            update = np.sign(c)
            # </paper2code name="update direction">
            # <paper2code name="parameter update">
            p -= lr * update
            # </paper2code name="parameter update">
            # <paper2code name="momentum update">
            m *= self.beta2
            m += (1.0 - self.beta2) * g
            # </paper2code name="momentum update">
        self.step_count += 1
        # </paper2code name="lion step">


def lion_hparams_from_adamw(lr_adamw, wd_adamw, factor=10.0):
    """Translate AdamW settings to Lion: the learning rate is divided by `factor`
    and the weight decay multiplied by it, so lr * wd stays unchanged."""
    # <paper2code name="hparam transfer">
    lr = lr_adamw / factor
    wd = wd_adamw * factor
    # </paper2code name="hparam transfer">
    return lr, wd
