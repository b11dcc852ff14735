"""The seed's workloads at their real sizes: the lowered gradients allocate no Jacobian-sized
temporaries and do the work of the hand-written gradient.

The seed's TVM gradients of max pooling allocated a ``[1, 2, 50, 50, 1, 2, 100, 100]`` tensor
and iterated 5000-long reductions per element for flatten.  Here each workload of the benchmark
table (``benchmarks/workloads.py``, its real shapes, float32) is differentiated as the benchmark
does it (``ta.JacobianRecursive(Y, grads, H)``) and lowered -- not built -- with every input and
the head as kernel arguments.  Two bars:

* every temporary buffer ``LoweredFunc.temporaries`` lists is no larger (in elements) than the
  largest of the kernel's inputs, head and outputs;
* ``LoweredFunc.work`` (innermost-body executions) is at most 1.25x the work of the hand-written
  gradient formula stated with each workload below.
"""

from __future__ import annotations

import importlib.util
import math
import pathlib
import sys

import pytest

import tensorad as ta

nn = ta.topi.nn
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load_benchmark_table():
    """``benchmarks/workloads.py`` by path (the repository root is not put on ``sys.path``)."""
    if "bench_workloads" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_workloads",
                                                      ROOT / "benchmarks" / "workloads.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_workloads"] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["bench_workloads"].WORKLOADS


TABLE = {w.name: w for w in _load_benchmark_table() if w.suite == "seed"}


def _forward(kind: str, p: dict):
    """Y as the seed notebook defines it, from ``ta.topi``."""
    if kind == "dense":
        return nn.dense(p["X"], p["W"], p["B"])
    if kind == "conv2d":
        return nn.conv2d(p["X"], p["W"], 1, 0)
    if kind in ("avg_pool", "max_pool"):
        return nn.pool(p["X"], [2, 2], [2, 2], [0, 0, 0, 0], kind.split("_")[0])
    if kind == "softmax_homebrew":
        exps = ta.topi.exp(nn.dense(p["X"], p["W"]))
        return exps / ta.topi.sum(exps, axis=-1, keepdims=True)
    if kind == "flatten":
        return nn.flatten(p["X"])
    if kind == "softmax":
        return nn.softmax(p["X"])
    raise KeyError(kind)


# ---- the hand-written gradients' work, from the shapes --------------------------------------

def _dense_work(s, grads):
    (b, n_in), (n_out, _) = s["X"], s["W"]
    work = b * n_out if "B" in grads else 0                 # dB[j] = sum_i H[i, j]
    work += b * n_in * n_out if "W" in grads else 0         # dW = H^T X
    work += b * n_in * n_out if "X" in grads else 0         # dX = H W
    return work


def _conv2d_work(s, grads):
    (n, c, h, w), (f, _, kh, kw) = s["X"], s["W"]
    oh, ow = h - kh + 1, w - kw + 1
    # stride 1, no padding: every (output, tap) pair is one multiply-add of dX and one of dW
    return len(grads) * n * f * c * oh * ow * kh * kw


def _avg_pool_work(s, grads):
    n, c, h, w = s["X"]
    return n * c * (h // 2 * 2) * (w // 2 * 2)                # dX[.., y, x] = H[.., y//2, x//2] / 4


def _max_pool_work(s, grads):
    n, c, h, w = s["X"]
    # the winner of each window and its count of ties (N*C*OH*OW*4 each), then each X element of a
    # window takes H / count where it ties the winner (N*C*OH*OW*4, every window tied in the worst case)
    return 3 * n * c * (h // 2) * (w // 2) * 4


def _softmax_homebrew_work(s, grads):
    (n, k), (m, _) = s["X"], s["W"]
    # D = X W^T (n*m*k), S = sum_j exp(D) (n*m), s = sum_j H*Y (n*m), G = Y*(H - s) (n*m),
    # dX = G W (n*k*m), dW = G^T X (m*k*n)
    return 3 * n * m * k + 3 * n * m


def _flatten_work(s, grads):
    return math.prod(s["X"])                                  # dX = H at the flat index


def _softmax_work(s, grads):
    n, m = s["X"]
    return 5 * n * m                                          # max, sum exp, Y, sum_j H*Y, Y*(H - s)


HAND = {"dense": _dense_work, "conv2d": _conv2d_work, "avg_pool": _avg_pool_work,
        "max_pool": _max_pool_work, "softmax_homebrew": _softmax_homebrew_work,
        "flatten": _flatten_work, "softmax": _softmax_work}


@pytest.fixture(scope="module", params=list(TABLE))
def lowered(request):
    w = TABLE[request.param]
    p = {k: ta.placeholder(s, "float32", k) for k, s in w.shapes.items()}
    y = _forward(w.kind, p)
    head = ta.placeholder(y.shape, "float32", "H")
    grads = ta.JacobianRecursive(y, [p[g] for g in w.grads], head)
    return w, ta.lower(grads, list(p.values()) + [head]), [*p.values(), head, *grads]


def test_no_temporary_is_larger_than_an_argument(lowered):
    w, lf, arguments = lowered
    largest = max(math.prod(t.shape) for t in arguments)
    big = [(name, shape) for name, shape, _ in lf.temporaries if math.prod(shape) > largest]
    assert not big, f"{w.name}: temporaries larger than the largest argument ({largest}): {big}\n{lf}"


def test_work_is_that_of_the_hand_written_gradient(lowered):
    w, lf, _ = lowered
    hand = HAND[w.kind](w.shapes, w.grads)
    assert lf.work <= 1.25 * hand, f"{w.name}: work {lf.work} > 1.25 x hand-written {hand}"


def test_temporaries_lists_what_a_call_allocates():
    """The property the bar above reads: name, shape and dtype of every allocated buffer."""
    X = ta.placeholder((6, 5), "float64", "X")
    Y = ta.topi.nn.softmax(X)
    H = ta.placeholder(Y.shape, "float64", "H")
    lf = ta.lower(ta.JacobianRecursive(Y, [X], H), [X, H])
    temps = lf.temporaries
    assert temps and all(isinstance(n, str) and isinstance(s, tuple) for n, s, _ in temps)
    assert {d for _, _, d in temps} <= {"float64", "int32"}
    assert [n for n, _, _ in temps] == [line.split()[1].rstrip(":") for line in str(lf).splitlines()
                                        if line.strip().startswith("allocate ")]
    assert ta.lower([ta.compute((6, 5), lambda i, j: X[i, j] * 2.0, name="Y2")], [X]).temporaries == []
