"""On an AMD EPYC Zen 4 (native target, default options) ``ta.build`` of a float64 to float16 cast
raised "JIT: object code uses symbols nothing defines: __truncdfhf2".

A float64 value cast to float16 is rounded to float32 first (the language's cast; NumPy's
``astype(float32).astype(float16)``), then to half by F16C's ``vcvtps2ph``.  Where the values
around carry fast-math's ``contract``, LLVM's code generator folded the two roundings into one
double -> half rounding -- a call of compiler-rt's ``__truncdfhf2``, which the JIT does not have,
and another result wherever the float32 lands on a tie.  A float32 just rounded from a double
now takes the integer half conversion (codegen/llvm/half.py).  Oracles: NumPy's two roundings,
``ta.evaluate``."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

TARGETS = ["llvm", "llvm -mcpu=haswell"]  # (haswell has F16C: the instruction path)


@pytest.mark.parametrize("target", TARGETS)
def test_the_fuzzed_product_builds_and_matches_evaluate(target):
    x0 = ta.placeholder((7, 7), "float64", name="x0")
    g = ta.placeholder((16,), "int32", name="g")
    r1 = ta.reduce_axis((0, 17), name="r1")
    t3 = ta.compute((5,), lambda i0: ta.prod(
        ta.if_then_else((r1 - 3 >= 0) & (r1 - 3 < 7), x0[r1 - 3, 1], 0.0)
        - ta.cast("float64", ta.cast("float16", 1.0 / x0.take(g[i0], (r1 + -1) % 7, mode="clip"))),
        axis=r1), name="t3")
    rng = np.random.default_rng(702112)
    x, gi = rng.uniform(0.5, 2.0, (7, 7)), rng.integers(-3, 10, 16).astype(np.int32)
    got = ta.build([t3], [x0, g], vector_width=1, target=target)(x, gi)
    np.testing.assert_allclose(got, ta.evaluate(t3, {x0: x, g: gi}), rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fastmath", [True, False])
def test_double_to_half_rounds_twice_as_numpy_does(target, fastmath):
    n = 1000
    X = ta.placeholder((n,), "float64", name="X")
    Y = ta.compute((n,), lambda i: ta.cast("float16", X[i] * 1.0 + 0.0), name="Y")
    rng = np.random.default_rng(3)
    x = rng.standard_normal(n) * np.exp2(rng.integers(-26, 17, n))
    # 1 + 2^-11 + 2^-30: one rounding to half gives 1 + 2^-10; through float32 it is the tie
    # 1 + 2^-11, which goes to the even 1.0
    x[:4] = [1 + 2.0**-11 + 2.0**-30, -(1 + 2.0**-11 + 2.0**-30), 65520.0, 2.0**-25 + 2.0**-40]
    with np.errstate(over="ignore"):  # (65520 rounds to inf)
        want = x.astype(np.float32).astype(np.float16)
    assert want[0] == 1.0 and want[1] == -1.0
    got = ta.build([Y], [X], fastmath=fastmath, target=target)(x)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_float32_to_half_keeps_the_instruction():
    X = ta.placeholder((256,), "float32", name="X")
    Y = ta.compute((256,), lambda i: ta.cast("float16", X[i] * 2.0), name="Y")
    k = ta.build([Y], [X], target="llvm -mcpu=haswell")
    assert "vcvtps2ph" in k.compiled.asm
    x = np.random.default_rng(4).standard_normal(256).astype(np.float32)
    np.testing.assert_array_equal(k(x).view(np.uint16), (x * 2.0).astype(np.float16).view(np.uint16))
