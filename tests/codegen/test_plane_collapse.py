"""A contiguous plane that LLVM would unroll into one body is emitted as one loop
(codegen/collapse.py).

A global average pool's gradient stores a 14 x 14 plane per channel; LLVM's ``-O3`` unrolled
both plane loops into 196 stores inside the channel loop and spent 0.25 of the build's 0.31
CPU-s analysing that loop's accesses (issue 9's cold compile bar).  The tests count loops and
trip bounds in the emitted IR, never time; results are checked against NumPy at every opt
level, and planes that must not collapse (a digit used as a value, transposed or padded rows,
windows, large planes) are checked to keep their loops."""

import re

import numpy as np
import pytest
from tensorad.codegen.chains import WINDOW_COPIES
from tensorad.codegen.collapse import collapsed_plane
from tensorad.codegen.llvm_emit import UNROLL_NEST_LIMIT
from tensorad.codegen.program import Loop

import tensorad as ta


def _gap_backward(shape=(4, 32, 14, 14)):
    X = ta.placeholder(shape, "float32", "X")
    Y = ta.topi.mean(X, axis=(2, 3))
    H = ta.placeholder(Y.shape, "float32", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    return dX, X, H


def _bounds(text: str) -> list[int]:
    """The constant upper bounds of the emitted loops (their back-edge tests)."""
    return [int(n) for n in re.findall(r"icmp slt i64 %\"?[\w.]+\"?, (\d+)", text)]


def _plane_loops(stmts) -> list[Loop]:
    """Every loop whose body is exactly one loop (a candidate plane), outermost first."""
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            if len(s.body) == 1 and isinstance(s.body[0], Loop):
                out.append(s)
            out += _plane_loops(s.body)
    return out


def _collapsed(kernel) -> list[Loop]:
    prog = kernel.lowered.program
    strides = {b.tensor: tuple(int(np.prod(b.shape[i + 1:])) for i in range(len(b.shape)))
               for b in prog.buffers.values()}
    found = []
    for step in prog.steps:
        for loop in _plane_loops(getattr(step, "body", ())):
            c = collapsed_plane(loop, lambda t: strides[t], WINDOW_COPIES, UNROLL_NEST_LIMIT)
            if c is not None:
                found.append(c)
    return found


def test_the_gradient_plane_is_one_loop_of_196():
    dX, X, H = _gap_backward()
    k = ta.build([dX], [X, H], cache=False)
    bounds = _bounds(k.llvm_ir_unoptimized)
    assert 196 in bounds and 14 not in bounds, bounds
    (plane,) = _collapsed(k)
    assert int(plane.hi.arg) == 196 and len(plane.body) == 1


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_gap_gradient_at_every_level(level):
    dX, X, H = _gap_backward((2, 5, 12, 9))  # 108 points: collapsed
    rng = np.random.default_rng(level)
    x = rng.uniform(-1, 1, X.shape).astype("float32")
    h = rng.uniform(-1, 1, H.shape).astype("float32")
    got = ta.build([dX], [X, H], cache=False, opt_level=level)(x, h)
    np.testing.assert_allclose(got, np.broadcast_to(h[:, :, None, None] / 108.0, X.shape), rtol=1e-6)


def test_plane_with_a_sum_inside():
    """A sum accumulating in its output over a plane of its own (not collapsed: the sum's axis
    is no digit of the output's address) stays right."""
    A = ta.placeholder((3, 10, 12, 4), "float32", "A")
    r = ta.reduce_axis((0, 4), "r")
    S = ta.compute((3, 10, 12), lambda n, y, x: ta.sum(A[n, y, x, r], axis=r), name="S")
    a = np.random.default_rng(1).uniform(-1, 1, A.shape).astype("float32")
    k = ta.build([S], [A], cache=False)
    np.testing.assert_allclose(k(a), a.sum(axis=3), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(k(a), ta.evaluate(S, {A: a}), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["value", "transposed", "padded_rows", "window", "large", "row_broadcast"])
def test_planes_that_keep_their_loops(case):
    """A digit used as a value, a transposed read, rows of another length, a window and a
    plane too large for LLVM to unroll keep both loops -- and compute the right thing."""
    rng = np.random.default_rng(2)
    if case == "value":
        X = ta.placeholder((2, 12, 10), "float32", "X")
        Y = ta.compute(X.shape, lambda n, y, x: X[n, y, x] + ta.cast("float32", x), name="Y")
        x = rng.uniform(-1, 1, X.shape).astype("float32")
        want = x + np.arange(10, dtype="float32")
    elif case == "transposed":
        X = ta.placeholder((2, 10, 12), "float32", "X")
        Y = ta.compute((2, 12, 10), lambda n, y, x: X[n, x, y] * 2.0, name="Y")
        x = rng.uniform(-1, 1, X.shape).astype("float32")
        want = x.transpose(0, 2, 1) * 2
    elif case == "padded_rows":
        X = ta.placeholder((2, 12, 16), "float32", "X")
        Y = ta.compute((2, 12, 10), lambda n, y, x: X[n, y, x] * 2.0, name="Y")
        x = rng.uniform(-1, 1, X.shape).astype("float32")
        want = x[:, :, :10] * 2
    elif case == "window":
        X = ta.placeholder((2, 3, 12, 12), "float32", "X")
        Y = ta.topi.nn.pool(X, (3, 3), (1, 1), [0] * 4, "max")
        x = rng.uniform(-1, 1, X.shape).astype("float32")
        want = np.stack([x[:, :, i:i + 10, j:j + 10] for i in range(3) for j in range(3)]).max(axis=0)
    elif case == "large":
        X = ta.placeholder((2, 20, 30), "float32", "X")
        Y = ta.compute(X.shape, lambda n, y, x: X[n, y, x] * 2.0, name="Y")
        x = rng.uniform(-1, 1, X.shape).astype("float32")
        want = x * 2
    else:  # a per-row value: B[y] read at the row digit alone
        X = ta.placeholder((2, 12, 10), "float32", "X")
        B = ta.placeholder((12,), "float32", "B")
        Y = ta.compute(X.shape, lambda n, y, x: X[n, y, x] * B[y], name="Y")
        x = rng.uniform(-1, 1, X.shape).astype("float32")
        b = rng.uniform(-1, 1, B.shape).astype("float32")
        k = ta.build([Y], [X, B], cache=False)
        assert _collapsed(k) == []
        np.testing.assert_allclose(k(x, b), x * b[None, :, None], rtol=1e-6)
        return
    k = ta.build([Y], [X], cache=False)
    assert _collapsed(k) == []
    np.testing.assert_allclose(k(x), want, rtol=1e-6)


def test_a_contiguous_elementwise_plane_collapses_and_matches_evaluate():
    X = ta.placeholder((2, 12, 10), "float32", "X")
    Z = ta.placeholder((2, 12, 10), "float32", "Z")
    Y = ta.compute(X.shape, lambda n, y, x: ta.maximum(X[n, y, x], Z[n, y, x]) * 3.0, name="Y")
    rng = np.random.default_rng(3)
    x, z = (rng.uniform(-1, 1, X.shape).astype("float32") for _ in range(2))
    for opts in ({}, {"checked": True}, {"fastmath": False, "opt_level": 1}):
        k = ta.build([Y], [X, Z], cache=False, **opts)
        assert [int(c.hi.arg) for c in _collapsed(k)] == [240]  # (the outer axes come fused)
        np.testing.assert_array_equal(k(x, z), ta.evaluate(Y, {X: x, Z: z}))
