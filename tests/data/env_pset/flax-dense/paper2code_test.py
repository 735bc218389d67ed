"""Checks dense.py against flax.linen.Dense with the same parameters."""
import unittest

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import dense


class TestDense(unittest.TestCase):
    def test_matches_flax_dense(self):
        x = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
        mine = dense.Dense(features=5)
        params = mine.init(jax.random.PRNGKey(0), x)
        self.assertEqual(params["params"]["kernel"].shape, (4, 5))
        ref = nn.Dense(features=5)
        got = mine.apply(params, x)
        want = ref.apply(params, x)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


if __name__ == "__main__":
    unittest.main()
