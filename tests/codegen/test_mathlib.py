"""Out-of-line vector math (codegen/llvm/math_functions.py): a module with many math sites calls one body
per (function, dtype) -- a scalar function and its vector form, which LLVM's vectorizer calls
in vectorized loops -- instead of inlining a copy at every site; a module with a few sites
keeps inline code.  Results against NumPy in float64 (special values included) and against
the inline code of the same function (bit for bit); sizes by counting lines, never by the clock.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from tensorad.codegen.target import host_target

import tensorad as ta

FUNCS = ("exp", "log", "tanh", "sigmoid", "erf", "pow")
RTOL = {"float32": 2e-6, "float64": 2e-15}


def _sigmoid(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(x < 0, np.exp(x) / (1 + np.exp(x)), 1 / (1 + np.exp(-x)))


def _reference(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    import math

    with np.errstate(all="ignore"):
        if name == "erf":
            return np.vectorize(math.erf, otypes=[np.float64])(x)
        if name == "sigmoid":
            return _sigmoid(x)
        if name == "pow":
            return np.power(x, y)
        return getattr(np, name)(x)


def _apply(name: str, x, y):
    return ta.power(x, y) if name == "pow" else getattr(ta, name)(x)


def _data(dtype: str, n: int = 1003) -> tuple[np.ndarray, np.ndarray]:
    """Points of the whole range (both signs, log-spaced magnitudes) and special values, with a
    length that leaves a remainder after the vectorized loop."""
    info = np.finfo(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, info.tiny, info.tiny / 8, -info.tiny / 8, info.max,
               1.0, -1.0]
    mags = np.logspace(np.log10(info.tiny), np.log10(info.max) * 0.99, (n - len(special)) // 2)
    x = np.concatenate([special, mags, -mags])[:n].astype(dtype)
    rng = np.random.default_rng(5)
    y = np.where(rng.random(n) < 0.5, rng.integers(-4, 5, n), rng.uniform(-3, 3, n)).astype(dtype)
    return x, y


def _close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    with np.errstate(over="ignore"):
        want = want.astype(dtype)
    tiny = np.finfo(dtype).smallest_subnormal
    np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=2 * tiny, equal_nan=True)


def _six(dtype: str, n: int):
    """The six functions of one element in one nest (one op with six outputs): six sites."""
    X = ta.placeholder((n,), dtype, name="X")
    Y = ta.placeholder((n,), dtype, name="Y")
    outs = ta.compute((n,), lambda i: tuple(_apply(f, X[i], Y[i]) for f in FUNCS), name="F")
    return X, Y, list(outs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_many_sites_call_one_body_per_function_and_match_numpy(dtype):
    x, y = _data(dtype)
    X, Y, outs = _six(dtype, len(x))
    kern = ta.build(outs, [X, Y], num_threads=1)
    got = kern(x, y)
    for name, g in zip(FUNCS, got):
        _close(g, _reference(name, x.astype(np.float64), y.astype(np.float64)), dtype)
    sfx = "f32" if dtype == "float32" else "f64"
    lanes = host_target().lanes(dtype)
    text = kern.llvm_ir_unoptimized
    for name in FUNCS:  # one scalar body and one vector body per function, nothing inline
        assert len(re.findall(rf"^define internal .*@\"?\w+_math_{name}_{sfx}\"?\(", text, re.M)) == 1
        assert len(re.findall(rf"^define internal .*@\"?\w+_math_{name}_v{lanes}{sfx}\"?\(", text, re.M)) == 1
    vector_calls = re.findall(rf"call [^\n]*_math_(\w+)_v{lanes}{sfx}\b", kern.llvm_ir)
    assert set(vector_calls) == set(FUNCS)  # the vectorized loop calls the vector forms


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_called_function_gives_the_bits_of_its_inline_code(dtype):
    x, y = _data(dtype, 203)
    X, Y, outs = _six(dtype, len(x))
    called = ta.build(outs, [X, Y], num_threads=1)(x, y)
    for name, got in zip(FUNCS, called):
        one = (lambda f: ta.compute(X.shape, lambda i: _apply(f, X[i], Y[i]), name=f"one_{f}"))(name)
        kern = ta.build([one], [X, Y], num_threads=1)  # one site: inline
        assert "_math_" not in kern.llvm_ir_unoptimized
        np.testing.assert_array_equal(kern(x, y), got)


def _chain(n: int, size: int = 64):
    """``n`` alternating tanh / sigmoid steps, each stored: many sites across nests."""
    X = ta.placeholder((size,), "float32", name="X")
    Y = X
    for k in range(n):
        Y = (lambda P, f: ta.compute((size,), lambda i: f(P[i]) * 0.9 + P[i] * 0.1, name=f"c{k}"))(
            Y, ta.tanh if k % 2 else ta.sigmoid)
    return X, Y


def test_module_size_per_math_site_stays_small():
    # inline, every site copied 40-70 lines of straight-line math into the module (and LLVM
    # optimized each copy); called, a site is one line, and the bodies are there once
    lines = {}
    for n in (40, 80):
        X, Y = _chain(n)
        kern = ta.build([Y], [X], num_threads=1, fuse=False)
        text = kern.llvm_ir_unoptimized
        lines[n] = text.count("\n")
        assert len(re.findall(r"^define internal", text, re.M)) == 4  # tanh, sigmoid: scalar + vector
    assert lines[80] - lines[40] <= 40 * 20, lines  # at most 20 lines per added step
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    X, Y = _chain(40)
    np.testing.assert_allclose(ta.build([Y], [X])(x), ta.evaluate(Y, {X: x.astype(np.float64)}), rtol=1e-5)


def test_a_layer_with_a_few_sites_keeps_inline_math():
    X = ta.placeholder((32, 100), "float32", name="X")
    Y = ta.topi.nn.softmax(X)
    (g,) = ta.gradient(ta.topi.sum(Y * Y), [X])
    for outs in ([Y], [g]):
        assert "_math_" not in ta.build(outs, [X]).llvm_ir_unoptimized
