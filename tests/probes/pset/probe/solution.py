"""The probe target: hostile completions replace the body of ``solve``."""


def solve(x):
    # <paper2code name="solve">
    return x * 2
    # </paper2code name="solve">
