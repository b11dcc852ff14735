"""A precision fuzz: random float64 programs built by ``ta.build`` against NumPy float64 formulas.

Hypothesis draws small programs over float64 inputs of shape ``(N, M)``: elementwise arithmetic and
math, selects on data, lazy choices on the index, index values, reductions (sum, max, min) and
computed tensors read by later ones, with Python floats mixed in: bare (``0.1 * X[i, j]``), as
``ta.const(c)``, and combined by tensorad operations before they meet data
(``(1.0 - ta.select(c, 11/12, 1/120)) * X[i, j]``, ``ta.sqrt(ta.const(2.0)) * ...``).  Each program
is drawn as a tree that renders twice: to tensorad, and to a NumPy float64 formula written here (no
tensorad evaluation: a constant tensorad rounds when it builds an expression rounds in both of its own
evaluators alike).  The reverse gradient of the last compute is checked along random tangents ``V`` and
a head ``H``: ``sum_k <dX_k, V_k> = <H, jvp(V)>``, the JVP propagated beside the NumPy values.

The bound is condition-aware: beside each NumPy value runs a magnitude ``m >= |v|`` that propagates
absolute values through sums and each function's slope, so ``|kernel - numpy| <= 1e-12 m`` holds for
any correct float64 evaluation order (float64 rounding gives about ``1e-16 m`` per operation), while
a constant rounded to float32 (a relative error near ``3e-8`` of its term) fails it; tangents carry a
magnitude the same way (a slope's own rounding bounded through the functions' curvature).  Conditions read
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


# ---- rendering to NumPy float64, with magnitudes and tangents ----------------------------------
# each function: its value, and its slope from its argument and value
_F = {
    "tanh": (np.tanh, lambda x, y: 1.0 - y * y),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), lambda x, y: y * (1.0 - y)),
    "sin": (np.sin, lambda x, y: np.cos(x)),
    "cos": (np.cos, lambda x, y: -np.sin(x)),
    "exp": (lambda x: np.exp(np.minimum(x, 2.0)), lambda x, y: np.where(x < 2.0, y, 0.0)),
    "log": (lambda x: np.log(np.abs(x) + 1.0), lambda x, y: np.sign(x) / (np.abs(x) + 1.0)),
    "sqrt": (lambda x: np.sqrt(np.abs(x) + 0.25), lambda x, y: np.sign(x) / (2.0 * y)),
    "erf": (np.vectorize(math.erf, otypes=[np.float64]),
            lambda x, y: 2.0 / math.sqrt(math.pi) * np.exp(-x * x)),
}
CURVE = 8.0  # |f''| <= 8 for each function of _F where the data are (exp's: e^2)


def _np(node, env):
    """``(value, magnitude, tangent, tangent magnitude)`` arrays over the grid ``(N, M, R)`` of
    ``(i, j, r)``: the tangent along the inputs' tangents ``env["tangents"]``."""
    kind = node[0]
    if kind in ("float", "tafloat", "ivalue"):
        v = np.float64(node[1]) if kind != "ivalue" else (env[node[1]] + node[2]).astype(np.float64)
        return v, np.abs(v), 0.0, 0.0
    if kind == "read":
        at = node[2]
        i, j = env["i"], env["j"]
        at = (i, j) if at == "ij" else (i, M - 1 - j) if at == "rev" else (i, env["r"])
        return tuple(a[at] for a in env["tensors"][node[1]])
    if kind == "unary":
        x, mx, tx, mtx = _np(node[2], env)
        fn = node[1]
        if fn in ("neg", "abs"):
            sign = -1.0 if fn == "neg" else np.sign(x)
            return x * sign, mx, tx * sign, mtx
        f, slope = _F[fn]
        y = f(x)
        d = slope(x, y)
        mag = np.abs(y) * (1.0 + mx) if fn == "exp" else np.abs(y) + 1.2 * mx  # slopes: at most 1.2
        return y, mag, d * tx, (np.abs(d) + CURVE * mx) * mtx
    if kind == "binary":
        (a, ma, ta_, mta), (b, mb, tb, mtb) = _np(node[2], env), _np(node[3], env)
        fn = node[1]
        if fn in ("add", "sub"):
            sign = 1.0 if fn == "add" else -1.0
            return a + sign * b, ma + mb, ta_ + sign * tb, mta + mtb
        if fn == "mul":
            return a * b, ma * mb, ta_ * b + a * tb, mta * mb + ma * mtb
        if fn == "div":
            d = np.abs(b) + 1.0
            q = a / d
            return q, (ma + np.abs(q) * mb) / d, (ta_ - q * np.sign(b) * tb) / d, \
                (mta + (np.abs(q) + CURVE * ma) * mtb) / d
        if fn in ("max", "min"):
            first = a >= b if fn == "max" else a <= b
            return np.where(first, a, b), np.maximum(ma, mb), np.where(first, ta_, tb), np.maximum(mta, mtb)
        base = np.abs(a) + 0.5
        return base * base, (ma + 0.5) ** 2, 2.0 * base * np.sign(a) * ta_, 2.0 * (ma + 0.5) * mta
    if kind == "select":
        cond = env["tensors"][node[1]][0][env["i"], env["j"]] > node[2]
    else:
        cond = env[node[1]] < node[2]
    a, b = _np(node[3], env), _np(node[4], env)
    return tuple(np.where(cond, x, y) for x, y in zip(a, b))


def _reference(computes, data, tangents):
    """Each compute's value, magnitude, tangent and tangent magnitude, over ``(N, M)``."""
    i, j, r = np.arange(N)[:, None, None], np.arange(M)[None, :, None], np.arange(M)[None, None, :]
    tensors = [(x, np.abs(x), t, np.abs(t)) for x, t in zip(data, tangents)]
    for form, body, outer in computes:
        env = {"tensors": tensors, "i": i, "j": j, "r": r}
        v, m, t, mt = (np.broadcast_to(a, (N, M, M)) for a in _np(body, env))
        if form == "elementwise":
            v, m, t, mt = v[:, :, 0], m[:, :, 0], t[:, :, 0], mt[:, :, 0]
        elif form in ("sum", "nested"):
            v, m, t, mt = v.sum(axis=2), m.sum(axis=2), t.sum(axis=2), mt.sum(axis=2)
        else:  # the tangent of the first extreme (ties: equal terms of equal tangents, or flat ones)
            at = (v.argmax(axis=2) if form == "max" else v.argmin(axis=2))[:, :, None]
            v, t = (np.take_along_axis(a, at, axis=2)[:, :, 0] for a in (v, t))
            m, mt = m.max(axis=2), mt.max(axis=2)
        if outer is not None:
            env["r"] = np.zeros_like(r)
            w, mw, tw, mtw = (np.broadcast_to(a, (N, M, 1))[:, :, 0] for a in _np(outer, env))
            v, m, t, mt = v * 0.1 + w, m * 0.1 + mw, t * 0.1 + tw, mt * 0.1 + mtw
        tensors.append((v, m, t, mt))
    return tensors[len(data):]


@settings(max_examples=examples(16), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(computes=_program(), seed=st.integers(0, 2**16))
def test_float64_programs_with_python_floats_match_numpy_in_float64(computes, seed):
    """Every compute's values; and the reverse gradient of the last one along a head ``H``, through
    ``sum_k <dX_k, V_k> = <H, jvp(V)>`` for random tangents ``V`` (the JVP in NumPy, above)."""
    inputs = [ta.placeholder((N, M), "float64", f"in{n}") for n in range(2)]
    outputs = _build(computes, inputs)
    assert all(t.dtype == "float64" for t in outputs)
    H = ta.placeholder((N, M), "float64", "H")
    grads = ta.JacobianRecursive(outputs[-1], inputs, H)
    rng = np.random.default_rng(seed)
    data, tangents = ([rng.uniform(-2.0, 2.0, (N, M)) for _ in inputs] for _ in range(2))
    head = rng.uniform(-2.0, 2.0, (N, M))
    got = ta.build(outputs + list(grads), inputs + [H])(*data, head)
    reference = _reference(computes, data, tangents)
    for c, (y, (want, mag, _, _)) in enumerate(zip(got, reference)):
        bad = np.abs(y - want) > RTOL * mag + 1e-300
        assert not bad.any(), f"t{c} of {computes}: {y[bad]} != {want[bad]} (bound {RTOL * mag[bad]})"
    _, _, jvp, jvp_mag = reference[-1]
    reverse = sum(float(np.sum(g * t)) for g, t in zip(got[len(outputs):], tangents))
    forward, bound = float(np.sum(head * jvp)), float(np.sum(np.abs(head) * jvp_mag))
    assert abs(reverse - forward) <= 10 * RTOL * bound + 1e-300, \
        f"gradient of {computes}: <dX, V> = {reverse} but <H, jvp> = {forward} (bound {10 * RTOL * bound})"
