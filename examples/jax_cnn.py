"""Train a small CNN whose layers are tensorad programs, in JAX, on synthetic data.

    python examples/jax_cnn.py                   # 30 SGD steps of the tensorad model
    python examples/jax_cnn.py --compare         # and the same model in pure JAX, side by side

The model (as in ``torch_cnn.py``): conv2d 3x3 (padding 1) + bias -> relu -> 2x2 max pool ->
flatten -> dense.  The two layers are functions written with ``ta.topi`` and decorated with
``@ta.jax.op``: JAX functions (a JAX primitive whose evaluation, derivatives and batching are
tensorad kernels), compiled for each shape on first use; the loss, ``jax.grad``, ``jax.jit``
of the whole training step and the SGD update are ordinary JAX.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import tensorad as ta

CLASSES, SIDE, CHANNELS, BATCH = 10, 12, 8, 32


@ta.jax.op
def conv_relu_pool(X, W, B):
    conv = ta.topi.nn.conv2d(X, W, 1, 1) + ta.topi.reshape(B, (B.shape[0], 1, 1))
    return ta.topi.nn.pool(ta.topi.nn.relu(conv), 2, 2, 0, "max")


@ta.jax.op
def flatten_dense(X, W, B):
    return ta.topi.nn.dense(ta.topi.nn.flatten(X), W, B)


def tensorad_model(params, x):
    """The model with the two tensorad layers (compiled for each batch size on first use)."""
    w1, b1, w2, b2 = params
    return flatten_dense(conv_relu_pool(x, w1, b1), w2, b2)


def jax_model(params, x):
    """The same model in pure JAX (the comparison)."""
    w1, b1, w2, b2 = params
    y = jax.lax.conv_general_dilated(x, w1, (1, 1), [(1, 1), (1, 1)]) + b1[None, :, None, None]
    y = jax.lax.reduce_window(jnp.maximum(y, 0.0), -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return y.reshape(y.shape[0], -1) @ w2.T + b2


def initial_parameters(seed: int = 0) -> list[jnp.ndarray]:
    rng = np.random.default_rng(seed)
    hidden = CHANNELS * (SIDE // 2) ** 2
    return [jnp.asarray(a, jnp.float32) for a in (
        rng.standard_normal((CHANNELS, 1, 3, 3)) * 0.3, np.zeros(CHANNELS),
        rng.standard_normal((CLASSES, hidden)) * hidden ** -0.5, np.zeros(CLASSES))]


def synthetic_data(n: int = 8 * BATCH, seed: int = 1):
    """Images of 10 random templates plus noise; the label is the template."""
    rng = np.random.default_rng(seed)
    templates = rng.standard_normal((CLASSES, 1, SIDE, SIDE))
    labels = np.arange(n) % CLASSES
    images = templates[labels] + 0.8 * rng.standard_normal((n, 1, SIDE, SIDE))
    return jnp.asarray(images, jnp.float32), jnp.asarray(labels)


def train(model, steps: int, batch: int = BATCH, lr: float = 0.05) -> list[float]:
    images, labels = synthetic_data()

    def loss_fn(params, x, y):
        logp = jax.nn.log_softmax(model(params, x))
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return [p - lr * g for p, g in zip(params, grads)], loss

    params, losses = initial_parameters(), []
    for k in range(steps):
        lo = (k * batch) % len(images)
        params, loss = step(params, images[lo:lo + batch], labels[lo:lo + batch])
        losses.append(float(loss))
    return losses


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--compare", action="store_true", help="also train the pure JAX model")
    args = parser.parse_args(argv)
    runs = {"tensorad": train(tensorad_model, args.steps)}
    if args.compare:
        runs["jax"] = train(jax_model, args.steps)
    for step in range(args.steps):
        print(f"step {step:3d}  " + "  ".join(f"{k} loss {v[step]:.6f}" for k, v in runs.items()))
    return runs


if __name__ == "__main__":
    main()
