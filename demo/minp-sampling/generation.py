"""Toy autoregressive decoding loop for the min-p demo (context file, not annotated).

A "language model" here is a table of next-token logits indexed by the
previous token. `sampler(logits, rng)` returns the chosen token id(s).
"""
import numpy as np


def generate(bigram_logits, start_token, num_tokens, sampler, rng):
    """Decode `num_tokens` tokens after `start_token` and return them as a list."""
    tokens = [int(start_token)]
    for _ in range(num_tokens):
        logits = bigram_logits[tokens[-1]]
        tokens.append(int(np.asarray(sampler(logits, rng)).reshape(())))
    return tokens[1:]


def random_bigram_model(vocab_size, rng, scale=3.0):
    """Random bigram logit table of shape (vocab_size, vocab_size)."""
    return rng.normal(scale=scale, size=(vocab_size, vocab_size))
