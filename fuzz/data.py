"""Input data for fuzzed programs, by profile.

* ``unit``: uniform in [-2, 2];
* ``smooth``: uniform in [0.2, 1.5] with random signs (no value near 0, where ``|x|`` kinks);
* ``nasty``: exact zeros, ties (a few repeated values), and negative and positive values;
* ``wide``: uniform in [-60, 60] (``exp`` of such logits is near the float32 range);
* ``huge``: mostly unit values with some at +-1e30 (float32's range ends at 3.4e38);
* ``special``: unit values with inf, -inf, NaN, 0.0 and -0.0 among them.

Half dtypes (``float16``, ``bfloat16``) are the values rounded to them.

Integer inputs are small (in [-3, 3]).  Everything comes from one seed.
"""

from __future__ import annotations

import numpy as np


def array(profile: str, shape: tuple, dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype.startswith("int"):
        return rng.integers(-3, 4, size=shape).astype(dtype)
    if profile == "smooth":
        a = rng.uniform(0.2, 1.5, size=shape) * rng.choice((-1.0, 1.0), size=shape)
    elif profile == "nasty":
        pool = np.array([0.0, 0.0, 1.0, -1.0, 0.5, 2.0, -3.0])
        a = np.where(rng.random(shape) < 0.6, rng.choice(pool, size=shape), rng.uniform(-2, 2, size=shape))
    elif profile == "wide":
        a = rng.uniform(-60.0, 60.0, size=shape)
    elif profile == "huge":
        a = rng.uniform(-2, 2, size=shape)
        a = np.where(rng.random(shape) < 0.25, rng.choice((-1e30, 1e30), size=shape), a)
    elif profile == "special":
        pool = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0])
        a = np.where(rng.random(shape) < 0.3, rng.choice(pool, size=shape), rng.uniform(-2, 2, size=shape))
    else:
        a = rng.uniform(-2.0, 2.0, size=shape)
    with np.errstate(over="ignore"):  # 1e30 is inf in half types: meant
        return np.asarray(a).astype(np_dtype(dtype))


def np_dtype(dtype: str) -> np.dtype:
    """NumPy's dtype of a tensorad dtype (bfloat16 from ml_dtypes)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def feed(placeholders, profile: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {p: array(profile, p.shape, p.dtype, rng) for p in placeholders}
