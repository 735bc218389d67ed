import flax.linen as nn
import jax.numpy as jnp


class Dense(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        # <paper2code name="parameters">
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        # </paper2code name="parameters">
        # <paper2code name="affine">
        return jnp.dot(x, kernel) + bias
        # </paper2code name="affine">
