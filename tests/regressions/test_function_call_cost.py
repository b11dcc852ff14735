"""A call of a ``ta.function`` cost time quadratic in the number of saved tensors: every
``forward`` and ``backward`` found where each residual comes from again, by looking each saved
tensor up in the tuples of outputs and saved extras -- and tensors compare structurally, their
whole definitions.  A chain of 80 layers spent 26 ms per forward around a 0.1 ms kernel.

Now the residuals' sources are found once per function.  The test counts the structural
comparisons of tensors that a call makes (none, at any depth), not its time."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir.tensor import Tensor


def _chain(depth: int) -> tuple[ta.Function, np.ndarray, np.ndarray]:
    X = ta.placeholder((4, 8), name="X")
    W = ta.placeholder((8, 8), name="W")
    h = X
    for _ in range(depth):
        h = ta.topi.tanh(ta.topi.nn.dense(h, W))
    f = ta.function(ta.topi.sum(h), [X, W], wrt=[W])
    rng = np.random.default_rng(0)
    return f, rng.random((4, 8), np.float32), (rng.random((8, 8), np.float32) - 0.5) * 0.2


def test_a_call_compares_no_tensors(monkeypatch):
    compared = []
    structural = Tensor.__eq__
    for depth in (3, 24):
        f, x, w = _chain(depth)
        _, residuals = f.forward(x, w)
        f.backward(residuals, 1.0)  # (the kernels built, the plan's lookups made)
        assert len(residuals) >= depth  # (a tanh's output saved per layer)
        compared.clear()
        monkeypatch.setattr(Tensor, "__eq__", lambda a, b: compared.append(1) or structural(a, b))
        _, residuals = f.forward(x, w)
        f.backward(residuals, 1.0)
        monkeypatch.undo()
        assert not compared, f"depth {depth}: {len(compared)} tensor comparisons in one call"


def test_a_backward_checks_only_the_values_its_forward_did_not_make(monkeypatch):
    """Each input of a kernel call is checked (type, shape, dtype, layout), about a microsecond
    an array: a backward reading eighty saved activations spent more checking them than its
    kernel ran.  The saved values its own forward made pass the check once; after that only the
    function's inputs among the residuals and the heads are checked."""
    from tensorad.codegen import Kernel

    f, x, w = _chain(24)
    _, residuals = f.forward(x, w)
    want = f.backward(residuals, 1.0)
    checked = []
    check = Kernel.check_input
    monkeypatch.setattr(Kernel, "check_input",
                        staticmethod(lambda a, spec: checked.append(spec[0]) or check(a, spec)))
    _, residuals = f.forward(x, w)
    got = f.backward(residuals, 1.0)
    monkeypatch.undo()
    made = sum(kind != "input" for kind, _ in f.plan.sources)
    assert made >= 24
    # the forward's two inputs, then the backward's inputs among the residuals and its head
    assert len(checked) == 2 + (len(residuals) - made) + 1, checked
    np.testing.assert_array_equal(got[0], want[0])
    # a plain tuple of the same arrays is checked in full, and gives the same gradient
    np.testing.assert_array_equal(f.backward(tuple(residuals), 1.0)[0], want[0])


def test_residuals_of_another_function_are_checked():
    """Another function's residuals are not trusted: arrays of other shapes are a clear error."""
    f, x, w = _chain(3)
    g, _, _ = _chain(3)
    _, mine = f.forward(x, w)
    f.backward(mine, 1.0)
    f.backward(mine, 1.0)
    x6 = np.ones((6, 8), np.float32)
    X = ta.placeholder((6, 8), name="X")
    W = ta.placeholder((8, 8), name="W")
    other = ta.function(ta.topi.sum(ta.topi.tanh(ta.topi.nn.dense(X, W))), [X, W], wrt=[W])
    _, theirs = other.forward(x6, w)
    with pytest.raises(ValueError, match="residuals must be the"):
        f.backward(theirs, 1.0)
    bad = tuple(np.ones((6, 8), np.float32) for _ in mine)
    with pytest.raises(ValueError, match="expected shape"):
        f.backward(bad, 1.0)
    same_shapes = g.forward(x, w)[1]  # another function's residuals of the right shapes pass the checks
    np.testing.assert_allclose(f.backward(same_shapes, 1.0)[0], g.backward(same_shapes, 1.0)[0])


def test_residuals_copy_and_pickle_as_plain_tuples():
    """The residuals' maker (the whole function) is not copied or pickled with them: a copy is a
    plain tuple of the arrays, whose backward checks every one."""
    import copy
    import pickle

    f, x, w = _chain(2)
    _, residuals = f.forward(x, w)
    want = f.backward(residuals, 1.0)[0]
    for other in (pickle.loads(pickle.dumps(residuals)), copy.deepcopy(residuals), copy.copy(residuals)):
        assert type(other) is tuple and len(other) == len(residuals)
        np.testing.assert_array_equal(f.backward(other, 1.0)[0], want)
