import numpy as np


def sigmoid(x):
    # <paper2code name="sigmoid">
    return 1.0 / (1.0 + np.exp(-x))
    # </paper2code name="sigmoid">


def swish(x, beta=1.0):
    # <paper2code name="swish">
    return x * sigmoid(beta * x)
    # </paper2code name="swish">
