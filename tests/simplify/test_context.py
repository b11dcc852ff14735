"""The optimizer keeps its memo tables in a context per call.

* no module of the optimizer holds a dict, set or cache at module level
  (``tests/test_architecture.py`` checks that);
* two threads optimizing different programs at once get what each gets alone;
* a result does not depend on what the process optimized before (the same program, built
  afresh, prints the same whether or not other programs were optimized in between).
"""

from __future__ import annotations

import threading

import numpy as np
from tensorad.simplify import Optimizer, OptimizerContext

import tensorad as ta
from tensorad.ir import tensor_graph

F = "float64"


def _conv_grad():
    X = ta.placeholder((1, 2, 9, 9), F, name="X")
    W = ta.placeholder((3, 2, 3, 3), F, name="W")
    Y = ta.topi.nn.conv2d(X, W, 2, 1)
    H = ta.placeholder(Y.shape, F, name="H")
    return [X, W, H], ta.JacobianRecursive(Y, [X, W], H)


def _pool_softmax_grad():
    X = ta.placeholder((2, 3, 8, 8), F, name="X")
    P = ta.topi.nn.pool(X, (2, 2), (2, 2), [0, 0, 0, 0], "max")
    S = ta.topi.nn.softmax(ta.topi.reshape(P, (2, 48)))
    H = ta.placeholder(S.shape, F, name="H")
    return [X, H], ta.JacobianRecursive(S, [X], H)


def _flatten_grad():
    X = ta.placeholder((3, 4, 5), F, name="X")
    Y = ta.topi.nn.flatten(X)
    Z = ta.compute(Y.shape, lambda i, j: ta.if_then_else(j % 3 == 0, Y[i, j] * Y[i, j], 0.0), name="Z")
    H = ta.placeholder(Z.shape, F, name="H")
    return [X, H], ta.JacobianRecursive(Z, [X], H)


PROGRAMS = [_conv_grad, _pool_softmax_grad, _flatten_grad]


def _summary(make):
    inputs, grads = make()
    rng = np.random.default_rng(0)
    feed = {p: rng.standard_normal(p.shape) for p in inputs}
    values = ta.evaluate(grads, feed)
    text = "\n".join(ta.PrintTensorRecursively(g) for g in grads)
    return text, ta.lower(grads, inputs).work, values


def _same(a, b):
    assert a[0] == b[0]
    assert a[1] == b[1]
    for x, y in zip(a[2], b[2]):
        np.testing.assert_array_equal(x, y)


def test_results_do_not_depend_on_what_ran_before():
    alone = _summary(_flatten_grad)
    for make in PROGRAMS:  # other programs optimized in between, then the same one again
        _summary(make)
    _same(alone, _summary(_flatten_grad))


def test_two_threads_optimizing_at_once_get_the_serial_results():
    serial = [_summary(make) for make in PROGRAMS]
    results: dict = {}
    errors: list = []
    barrier = threading.Barrier(len(PROGRAMS))

    def run(k, make):
        try:
            barrier.wait()
            results[k] = _summary(make)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k, m)) for k, m in enumerate(PROGRAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(len(PROGRAMS)):
        _same(serial[k], results[k])


def test_one_context_serves_the_adjoints_of_one_call():
    inputs, grads = _conv_grad()
    opt = Optimizer()
    assert isinstance(opt.context, OptimizerContext)
    X, W, H = inputs
    Y = ta.topi.nn.conv2d(X, W, 2, 1)
    shared = ta.JacobianRecursive(Y, [X, W], H)
    assert len(tensor_graph(shared)) == len(tensor_graph(grads))
