"""The differentiation cache (``tensorad/diffcache.py``): a differentiated program read back
from disk is the one that was written, bound to the caller's tensors, with fresh identities.

Oracles: the canonical text of the result (``describe_graph``: every op, node, constant, range
and name, numbered by reach, so shared structure shows) of the computed and of the loaded
result; their values under ``ta.evaluate``; a second process that reads what the first wrote.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples, random_feed, random_program
from tensorad.codegen.jit import disk_cache as diskcache
from tensorad.codegen.jit.build_key import describe_graph

import tensorad as ta
from tensorad import diffcache
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import placeholders


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def loads(monkeypatch):
    """How many entries were read back (and bound) so far."""
    seen = []
    real = diffcache._load

    def counted(payload, graph):
        out = real(payload, graph)
        seen.append(out is not None)
        return out
    monkeypatch.setattr(diffcache, "_load", counted)
    return seen


def _text(tensors):
    return describe_graph(list(tensors)).text


def _dense():
    X = ta.placeholder((4, 6), "float64", "X")
    W = ta.placeholder((3, 6), "float64", "W")
    k = ta.reduce_axis((0, 6), "k")
    Y = ta.compute((4, 3), lambda i, j: ta.tanh(ta.sum(X[i, k] * W[j, k], axis=k)), name="Y")
    return X, W, Y


def _vars(tensors):
    """The uids of the variables in the ops of ``tensors`` and below them."""
    out, stack, seen = set(), [t for t in tensors], set()
    while stack:
        t = stack.pop()
        if t in seen or t.is_placeholder:
            continue
        seen.add(t)
        nodes = list(t.op.axes) + list(t.op.body)
        while nodes:
            e = nodes.pop()
            if e.op is Op.VAR:
                out.add(e.arg.uid)
            nodes.extend(e.src)
            if e.op is Op.READ:
                stack.append(e.arg)
            if e.op is Op.REDUCE:
                nodes.extend(e.arg.axes)
    return out


def test_a_derived_combiner_keeps_sharing_the_builtin_it_came_from(cache_dir, loads):
    """A custom product's gradient holds a built-in ``prod`` (the head's power over copies) and a
    combiner derived from it that reuses its variables and result.  Written by value, the derived
    one loaded with variables of its own while the built-in loaded as the process's own, so the
    loaded program's text (its build key) differed from the computed one's."""
    myprod = ta.comm_reducer(lambda x, y: x * y, lambda t: ta.const(1, t), name="myprod")
    A = ta.placeholder((3,), "float64", "A")
    k, r = ta.reduce_axis((0, 3), "k"), ta.reduce_axis((0, 2), "r")
    P = ta.compute((3,), lambda i: myprod(A[k], axis=k, where=k <= i), "P")
    Y = ta.compute((3,), lambda i: myprod(P[i], axis=r), "Y")
    H = ta.placeholder((3,), "float64", "H")
    first = ta.JacobianRecursive(Y, [A], H)
    second = ta.JacobianRecursive(Y, [A], H)
    assert loads == [True]
    assert _text(second) == _text(first)
    feed = {A: np.array([0.5, -2.0, 0.0]), H: np.array([1.0, -1.0, 3.0])}
    np.testing.assert_array_equal(ta.evaluate(second[0], feed), ta.evaluate(first[0], feed))


def test_the_second_call_reads_what_the_first_wrote(cache_dir, loads):
    X, W, Y = _dense()
    H = ta.placeholder((4, 3), "float64", "H")
    first = ta.JacobianRecursive(Y, [X, W], H)
    assert loads == []  # (nothing there yet)
    second = ta.JacobianRecursive(Y, [X, W], H)
    assert loads == [True]
    assert _text(second) == _text(first)
    assert ta.PrintTensorRecursively(second[1]) == ta.PrintTensorRecursively(first[1])
    rng = np.random.default_rng(0)
    feed = {t: rng.uniform(-1, 1, t.shape) for t in (X, W, H)}
    for a, b in zip(first, second):
        np.testing.assert_array_equal(ta.evaluate(b, feed), ta.evaluate(a, feed))
    # bound to this call's tensors, with variables of its own (none of the first result's)
    assert set(placeholders(second)) <= {X, W, H}
    assert not (_vars(second) - _vars([Y])) & (_vars(first) - _vars([Y]))


@pytest.mark.slow
def test_a_new_process_reads_the_entry(cache_dir):
    script = textwrap.dedent("""
        import hashlib
        import tensorad as ta
        from tensorad import diffcache
        from tensorad.codegen.jit.build_key import describe_graph
        found = []
        real = diffcache._load
        diffcache._load = lambda p, g: found.append(1) or real(p, g)
        x = ta.placeholder((8, 16), "float32", "x")
        g = ta.placeholder((16,), "float32", "g")
        b = ta.placeholder((16,), "float32", "b")
        y = ta.topi.nn.layer_norm(x, g, b)
        h = ta.placeholder(y.shape, "float32", "h")
        grads = ta.JacobianRecursive(y, [x, g, b], h)
        print(len(found), hashlib.sha256(describe_graph(grads).text.encode()).hexdigest())
    """)
    env = dict(os.environ, TENSORAD_CACHE_DIR=str(cache_dir))
    env.pop("TENSORAD_NO_DISK_CACHE", None)
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                           check=True).stdout.split() for _ in range(2)]
    assert runs[0][0] == "0" and runs[1][0] == "1"  # computed, then read
    assert runs[0][1] == runs[1][1]


def test_names_are_part_of_the_key(cache_dir, loads):
    X, W, Y = _dense()
    ta.JacobianRecursive(Y, [W])
    X2 = ta.placeholder((4, 6), "float64", "inputs")
    W2 = ta.placeholder((3, 6), "float64", "W")
    k = ta.reduce_axis((0, 6), "k")
    Y2 = ta.compute((4, 3), lambda i, j: ta.tanh(ta.sum(X2[i, k] * W2[j, k], axis=k)), name="Y")
    (g,) = ta.JacobianRecursive(Y2, [W2])
    assert loads == []  # another name: another key
    assert "inputs" in ta.PrintTensorRecursively(g) and "X" not in ta.PrintTensorRecursively(g)


def test_every_differentiation_call_is_cached(cache_dir, loads):
    X, W, Y = _dense()
    r = ta.reduce_axis((0, 4), "r")
    s = ta.compute((), lambda: ta.sum(Y[r, 0] * Y[r, 1], axis=r), name="s")
    U = ta.placeholder((4, 6), "float64", "U")
    calls = [lambda: [ta.Jacobian(Y, W)], lambda: [ta.jvp(Y, [X], [U])],
             lambda: ta.hessian_vector_product(s, [X], [U]), lambda: ta.JacobianRecursive(Y, X)]
    for call in calls:
        first, second = call(), call()
        assert _text(second) == _text(first)
    assert loads == [True] * len(calls)


def test_function_gradients_are_cached(cache_dir, loads):
    X, W, Y = _dense()
    f1, f2 = ta.function([Y], [X, W]), ta.function([Y], [X, W])
    assert _text(f2.grads) == _text(f1.grads) and loads == [True]
    rng = np.random.default_rng(1)
    x, w, h = rng.uniform(-1, 1, (4, 6)), rng.uniform(-1, 1, (3, 6)), rng.uniform(-1, 1, (4, 3))
    _, res = f2.forward(x, w)
    gx, gw = f2.backward(res, h)
    t = np.tanh(x @ w.T)
    np.testing.assert_allclose(gw, ((1 - t * t) * h).T @ x, rtol=1e-12)
    np.testing.assert_allclose(gx, ((1 - t * t) * h) @ w, rtol=1e-12)


def test_overrides_and_bad_arguments_are_not_cached(cache_dir, loads):
    X, W, Y = _dense()
    T = ta.compute((4, 3), lambda i, j: Y[i, j] * 2.0, name="T")
    def zero(out, x, head):  # (an adjoint written by hand: nothing to key it by)
        shape = tuple(head.shape[:head.ndim - out.ndim]) + tuple(x.shape)
        return ta.compute(shape, lambda *i: ta.const(0.0, "float64"), name="zero")
    override = {Y: zero}
    for _ in range(2):
        ta.JacobianRecursive(T, [W], override=override)
    assert loads == []
    with pytest.raises((TypeError, ValueError)):
        ta.JacobianRecursive(Y, ["W"])
    with pytest.raises((TypeError, ValueError)):
        ta.JacobianRecursive(Y, [W], "H")


def test_an_entry_that_does_not_read_is_recomputed(cache_dir, loads):
    X, W, Y = _dense()
    key, _ = diffcache.key_of("reverse", [[Y], [W], []], (True, False))
    want = _text(ta.JacobianRecursive(Y, [W]))
    for junk in (pickle.dumps(os.system), pickle.dumps(["not a tensor"]), b"\x80\x05junk"):
        diskcache.put(key, junk)
        assert _text(ta.JacobianRecursive(Y, [W])) == want
    assert loads == [False, False, False]
    assert _text(ta.JacobianRecursive(Y, [W])) == want and loads[-1]  # (rewritten)


def test_the_cache_can_be_turned_off(cache_dir, loads, monkeypatch):
    X, W, Y = _dense()
    monkeypatch.setenv("TENSORAD_NO_DISK_CACHE", "1")
    ta.JacobianRecursive(Y, [W])
    ta.JacobianRecursive(Y, [W])
    assert loads == [] and not list(cache_dir.iterdir())


def test_a_long_chain_round_trips(cache_dir, loads):
    x = ta.placeholder((5,), "float64", "x")
    t = x

    def step(t, n):
        return ta.compute((5,), lambda i: ta.sin(t[i]) * 1.01, name=f"t{n}")
    for n in range(600):  # (deeper than the interpreter's recursion limit in nested objects)
        t = step(t, n)
    first = ta.JacobianRecursive(t, [x])
    second = ta.JacobianRecursive(t, [x])
    assert loads == [True] and _text(second) == _text(first)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(program=random_program(dtype="float64", max_inputs=3, max_computes=4),
       seed=st.integers(0, 2**31 - 1))
def test_random_programs_round_trip(tmp_path_factory, program, seed):
    outputs, inputs = program
    Y = outputs[-1]
    head = ta.placeholder(Y.shape, Y.dtype, "head")
    prev = os.environ.get("TENSORAD_CACHE_DIR")
    os.environ["TENSORAD_CACHE_DIR"] = str(tmp_path_factory.mktemp("diffcache"))
    try:
        first = ta.JacobianRecursive(Y, inputs, head)
        second = ta.JacobianRecursive(Y, inputs, head)
    finally:
        os.environ["TENSORAD_CACHE_DIR"] = prev or ""
        if prev is None:
            del os.environ["TENSORAD_CACHE_DIR"]
    assert _text(second) == _text(first)
    feed = random_feed(list(inputs) + [head], np.random.default_rng(seed))
    for a, b in zip(first, second):
        np.testing.assert_array_equal(ta.evaluate(b, feed), ta.evaluate(a, feed))
