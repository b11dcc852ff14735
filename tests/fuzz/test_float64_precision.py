"""A precision fuzz: random float64 programs built by ``ta.build`` against NumPy float64 formulas.

Hypothesis draws small programs over float64 inputs of shape ``(N, M)``: elementwise arithmetic and
math, selects on data, lazy choices on the index, index values, reductions (sum, max, min) and
computed tensors read by later ones, with Python floats mixed in: bare (``0.1 * X[i, j]``), as
``ta.const(c)``, and combined by tensorad operations before they meet data
(``(1.0 - ta.select(c, 11/12, 1/120)) * X[i, j]``, ``ta.sqrt(ta.const(2.0)) * ...``).  Each program
is drawn as a tree that renders twice: to tensorad, and to a NumPy float64 formula written here (no
tensorad evaluation: a constant tensorad rounds when it builds an expression rounds in both of its own
evaluators alike).

The bound is condition-aware: beside each NumPy value runs a magnitude ``m >= |v|`` that propagates
absolute values through sums and each function's slope, so ``|kernel - numpy| <= 1e-12 m`` holds for
any correct float64 evaluation order (float64 rounding gives about ``1e-16 m`` per operation), while
a constant rounded to float32 (a relative error near ``3e-8`` of its term) fails it.  Conditions read
raw data, never computed values, so no choice flips on a rounding tie."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples

import tensorad as ta

N, M = 3, 4
RTOL = 1e-12
# Python floats float32 does not hold exactly, and a few it does
FLOATS = (0.1, 1 / 3, 11 / 12, 1 / 120, math.pi, 0.7, -2.3, 1e-3, 0.5, 2.0)
UNARY = ("neg", "abs", "tanh", "sigmoid", "sin", "cos", "exp", "log", "sqrt", "erf")
BINARY = ("add", "sub", "mul", "div", "max", "min", "pow")


# ---- program trees: nested tuples, drawn by hypothesis -------------------------------------------
@st.composite
def _const_tree(draw, depth: int):
    """A tree of Python floats and index values only: what NumPy keeps in float64 (a weak value)."""
    nodes = ("unary", "binary", "choice") if depth else ()
    kind = draw(st.sampled_from(("float", "tafloat", "ivalue") + nodes))
    if kind in ("float", "tafloat"):
        return (kind, draw(st.sampled_from(FLOATS)))
    if kind == "ivalue":
        return ("ivalue", draw(st.sampled_from("ij")), draw(st.integers(-1, 2)))
    if kind == "unary":
        return ("unary", draw(st.sampled_from(UNARY)), draw(_const_tree(depth - 1)))
    if kind == "binary":
        return ("binary", draw(st.sampled_from(BINARY)), draw(_const_tree(depth - 1)),
                draw(_const_tree(depth - 1)))
    return ("ite", draw(st.sampled_from("ij")), draw(st.integers(0, 2)), draw(_const_tree(depth - 1)),
            draw(_const_tree(depth - 1)))


@st.composite
def _tree(draw, depth: int, tensors: int, reduce: bool):
    """A value over the tensors ``0 .. tensors - 1`` (inputs, then computes), at ``(i, j)`` or, in a
    reduction's body (``reduce``), also at ``(i, r)``."""
    leaves = ("read", "read", "weak") + (("unary", "binary", "binary", "select", "ite") if depth else ())
    kind = draw(st.sampled_from(leaves))
    sub = _tree(depth - 1, tensors, reduce)
    if kind == "read":
        return ("read", draw(st.integers(0, tensors - 1)),
                draw(st.sampled_from(("ij", "rev") + (("ir", "ir") if reduce else ()))))
    if kind == "weak":
        return draw(_const_tree(draw(st.integers(0, 2))))
    if kind == "unary":
        return ("unary", draw(st.sampled_from(UNARY)), draw(sub))
    if kind == "binary":
        return ("binary", draw(st.sampled_from(BINARY)), draw(sub), draw(sub))
    if kind == "select":
        return ("select", draw(st.integers(0, tensors - 1)), draw(st.sampled_from((0.0, 0.5))), draw(sub),
                draw(sub))
    return ("ite", draw(st.sampled_from("ij")), draw(st.integers(0, 2)), draw(sub), draw(sub))


@st.composite
def _program(draw):
    """Two float64 inputs and one to three computes, each read by the later ones; a compute is
    elementwise, a reduction over ``r`` or a reduction nested in an elementwise body."""
    computes = []
    for c in range(draw(st.integers(1, 3))):
        form = draw(st.sampled_from(("elementwise", "sum", "max", "min", "nested")))
        body = draw(_tree(2, 2 + c, form != "elementwise"))
        # every body reads data (a body of Python floats alone is float32, as NumPy's would not be)
        anchor = ("read", draw(st.integers(0, 1 + c)), "ir" if form != "elementwise" else "ij")
        body = ("binary", draw(st.sampled_from(("add", "mul", "sub"))), body, anchor)
        outer = draw(_tree(1, 2 + c, False)) if form == "nested" else None
        computes.append((form, body, outer))
    return computes


# ---- rendering to tensorad ------------------------------------------------------------------------
def _ta(node, env):
    kind = node[0]
    if kind == "float":
        return node[1]
    if kind == "tafloat":
        return ta.const(node[1])
    if kind == "ivalue":
        return env[node[1]] + node[2]
    if kind == "read":
        t, at = env["tensors"][node[1]], node[2]
        i, j = env["i"], env["j"]
        return t[i, j] if at == "ij" else t[i, M - 1 - j] if at == "rev" else t[i, env["r"]]
    if kind == "unary":
        x = _ta(node[2], env)
        return {"neg": lambda: -x, "abs": lambda: ta.abs(x), "tanh": lambda: ta.tanh(x),
                "sigmoid": lambda: ta.sigmoid(x), "sin": lambda: ta.sin(x), "cos": lambda: ta.cos(x),
                "exp": lambda: ta.exp(ta.minimum(x, 2.0)), "log": lambda: ta.log(ta.abs(x) + 1.0),
                "sqrt": lambda: ta.sqrt(ta.abs(x) + 0.25), "erf": lambda: ta.erf(x)}[node[1]]()
    if kind == "binary":
        a, b = _ta(node[2], env), _ta(node[3], env)
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                "div": lambda: a / (ta.abs(b) + 1.0), "max": lambda: ta.maximum(a, b),
                "min": lambda: ta.minimum(a, b), "pow": lambda: ta.power(ta.abs(a) + 0.5, 2.0)}[node[1]]()
    if kind == "select":
        t = env["tensors"][node[1]]
        return ta.select(t[env["i"], env["j"]] > node[2], _ta(node[3], env), _ta(node[4], env))
    return ta.if_then_else(env[node[1]] < node[2], _ta(node[3], env), _ta(node[4], env))


def _build(computes, inputs):
    tensors = list(inputs)
    for c, (form, body, outer) in enumerate(computes):
        r = ta.reduce_axis((0, M), "r")

        def fcompute(i, j, form=form, body=body, outer=outer, r=r, pool=tuple(tensors)):
            env = {"tensors": pool, "i": i, "j": j, "r": r}
            if form == "elementwise":
                return _ta(body, env)
            reducer = {"sum": ta.sum, "max": ta.max, "min": ta.min, "nested": ta.sum}[form]
            red = reducer(_ta(body, env), axis=r)
            return red if outer is None else red * 0.1 + _ta(outer, env)

        tensors.append(ta.compute((N, M), fcompute, name=f"t{c}"))
    return tensors[len(inputs):]


# ---- rendering to NumPy float64, with magnitudes -----------------------------------------------
def _np(node, env):
    """``(value, magnitude)`` arrays over the grid ``(N, M, R)`` of ``(i, j, r)``."""
    kind = node[0]
    if kind in ("float", "tafloat"):
        v = np.float64(node[1])
        return v, abs(v)
    if kind == "ivalue":
        v = (env[node[1]] + node[2]).astype(np.float64)
        return v, np.abs(v)
    if kind == "read":
        (v, m), at = env["tensors"][node[1]], node[2]
        i, j = env["i"], env["j"]
        at = (i, j) if at == "ij" else (i, M - 1 - j) if at == "rev" else (i, env["r"])
        return v[at], m[at]
    if kind == "unary":
        x, mx = _np(node[2], env)
        fn = node[1]
        if fn in ("neg", "abs"):
            return (-x if fn == "neg" else np.abs(x)), mx
        if fn == "exp":
            y = np.exp(np.minimum(x, 2.0))
            return y, np.abs(y) * (1.0 + mx)
        y = {"tanh": np.tanh, "sigmoid": lambda t: 1.0 / (1.0 + np.exp(-t)), "sin": np.sin, "cos": np.cos,
             "log": lambda t: np.log(np.abs(t) + 1.0), "sqrt": lambda t: np.sqrt(np.abs(t) + 0.25),
             "erf": np.vectorize(math.erf, otypes=[np.float64])}[fn](x)
        return y, np.abs(y) + 1.2 * mx  # each slope is at most 2 / sqrt(pi) < 1.2
    if kind == "binary":
        (a, ma), (b, mb) = _np(node[2], env), _np(node[3], env)
        fn = node[1]
        if fn in ("add", "sub"):
            return (a + b if fn == "add" else a - b), ma + mb
        if fn == "mul":
            return a * b, ma * mb
        if fn == "div":
            d = np.abs(b) + 1.0
            q = a / d
            return q, (ma + np.abs(q) * mb) / d
        if fn in ("max", "min"):
            return (np.maximum(a, b) if fn == "max" else np.minimum(a, b)), np.maximum(ma, mb)
        base = np.abs(a) + 0.5
        return base * base, (ma + 0.5) ** 2
    if kind == "select":
        v, _ = env["tensors"][node[1]]
        cond = v[env["i"], env["j"]] > node[2]
    else:
        cond = env[node[1]] < node[2]
    (a, ma), (b, mb) = _np(node[3], env), _np(node[4], env)
    return np.where(cond, a, b), np.where(cond, ma, mb)


def _reference(computes, data):
    i, j, r = np.arange(N)[:, None, None], np.arange(M)[None, :, None], np.arange(M)[None, None, :]
    tensors = [(x, np.abs(x)) for x in data]
    for form, body, outer in computes:
        env = {"tensors": tensors, "i": i, "j": j, "r": r}
        v, m = _np(body, env)
        v, m = (np.broadcast_to(a, (N, M, M)) for a in (v, m))
        if form == "elementwise":
            v, m = v[:, :, 0], m[:, :, 0]
        elif form in ("sum", "nested"):
            v, m = v.sum(axis=2), m.sum(axis=2)
        else:
            v, m = (v.max(axis=2) if form == "max" else v.min(axis=2)), m.max(axis=2)
        if outer is not None:
            env["r"] = np.zeros_like(r)
            w, mw = (np.broadcast_to(a, (N, M, 1))[:, :, 0] for a in _np(outer, env))
            v, m = v * 0.1 + w, m * 0.1 + mw
        tensors.append((v, m))
    return tensors[len(data):]


@settings(max_examples=examples(16), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(computes=_program(), seed=st.integers(0, 2**16))
def test_float64_programs_with_python_floats_match_numpy_in_float64(computes, seed):
    inputs = [ta.placeholder((N, M), "float64", f"in{n}") for n in range(2)]
    outputs = _build(computes, inputs)
    assert all(t.dtype == "float64" for t in outputs)
    rng = np.random.default_rng(seed)
    data = [rng.uniform(-2.0, 2.0, (N, M)) for _ in inputs]
    got = ta.build(outputs, inputs)(*data)
    got = got if isinstance(got, tuple) else (got,)
    for c, (y, (want, mag)) in enumerate(zip(got, _reference(computes, data))):
        bad = np.abs(y - want) > RTOL * mag + 1e-300
        assert not bad.any(), (f"t{c} of {computes}: {y[bad]} != {want[bad]} (bound {RTOL * mag[bad]})")
