"""Reference copy of optim/lion.py (tags removed); the test compares against it.

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
        self.state = {name: {"exp_avg": np.zeros_like(p)} for name, p in params.items()}

    def step(self, grads, lr=None):
        """Apply one update given a dict of gradients with the same keys as params."""
        lr = self.lr if lr is None else lr
        for name, p in self.params.items():
            g = grads[name]
            m = self.state[name]["exp_avg"]
            p *= 1.0 - lr * self.weight_decay
            c = self.beta1 * m + (1.0 - self.beta1) * g
            update = np.sign(c)
            p -= lr * update
            m *= self.beta2
            m += (1.0 - self.beta2) * g
        self.step_count += 1


def lion_hparams_from_adamw(lr_adamw, wd_adamw, factor=10.0):
    """Translate AdamW settings to Lion: the learning rate is divided by `factor`
    and the weight decay multiplied by it, so lr * wd stays unchanged."""
    lr = lr_adamw / factor
    wd = wd_adamw * factor
    return lr, wd
