"""The probe's reference copy: the test compares the completion with it."""


def solve(x):
    return x * 2
