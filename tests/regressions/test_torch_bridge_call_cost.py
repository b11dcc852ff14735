"""A training step through ``ta.torch.function`` cost several times its kernels and a plain
``torch.autograd.Function`` over the same ``ta.function``: an eager call went through PyTorch's
dispatch of the registered custom operators (a redispatch below autograd, aliasing checks), in
an ``autograd.Function`` of the ``setup_context`` form, whose ``apply`` binds the arguments
with ``inspect.signature`` on every call.

Now an eager call under no ``torch.func`` transform runs the kernels on the tensors' NumPy views
in the ``forward(ctx)`` form, and its backward reads the block its forward saved without the
checks of a block received from elsewhere; the registered operators still serve
``torch.compile``, ``torch.func`` and tensors with no NumPy view.  The tests count the Python
functions a step calls (``sys.setprofile``), never its time."""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
import pytest
from blocks import dense_tanh_chain_gradient

import tensorad as ta

torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")


def _chain(depth: int):
    X, W = ta.placeholder((4, 8), name="X"), ta.placeholder((8, 8), name="W")
    h = X
    for _ in range(depth):
        h = ta.topi.tanh(ta.topi.nn.dense(h, W))
    return ta.torch.function(ta.topi.sum(h), [X, W], wrt=[W])


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(5)
    x = torch.from_numpy(rng.random((4, 8), np.float32))
    w = torch.from_numpy((rng.random((8, 8), np.float32) - 0.5) * 1.2).requires_grad_()
    return x, w



def _step_calls(fn, x: torch.Tensor, w: torch.Tensor) -> tuple[Counter, float, np.ndarray]:
    """The Python functions one forward and backward call, by file, and the loss and gradient."""
    calls: Counter = Counter()

    def count(frame, event, arg):
        if event == "call":
            calls[frame.f_code.co_filename.replace("\\", "/")] += 1

    w.grad = None
    sys.setprofile(count)
    try:
        loss = fn(x, w)
        loss.backward()
    finally:
        sys.setprofile(None)
    return calls, float(loss.detach()), w.grad.numpy().copy()


def test_an_eager_step_runs_the_kernels_without_the_operator_dispatch():
    for depth in (3, 24):
        fn = _chain(depth)
        x, w = _data()
        _step_calls(fn, x, w)  # (built, the plans made)
        calls, loss, grad = _step_calls(fn, x, w)
        dispatch = {f: n for f, n in calls.items() if "torch/_library" in f or f.endswith("/inspect.py")}
        assert not dispatch, dispatch
        want_loss, want_grad = dense_tanh_chain_gradient(depth, x.numpy(), w.detach().numpy())
        np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-5)


def test_an_eager_step_calls_as_much_at_any_depth():
    """A step saving 3 or 24 activations calls the same Python functions as often (the saved values
    are one block, saved for the backward and read there whole)."""
    counts = []
    for depth in (3, 24):
        fn = _chain(depth)
        x, w = _data()
        _step_calls(fn, x, w)
        counts.append(sum(_step_calls(fn, x, w)[0].values()))
    assert counts[0] == counts[1], counts


def test_torch_func_takes_the_registered_operator_and_agrees():
    """Under ``torch.func.grad`` the tensors are wrapped (no NumPy view): the call goes through the
    registered operators, and gives the eager path's gradient and the float64 one."""
    fn = _chain(4)
    x, w = _data()
    eager = _step_calls(fn, x, w)[2]
    calls: Counter = Counter()

    def count(frame, event, arg):
        if event == "call" and "torch/_library" in frame.f_code.co_filename.replace("\\", "/"):
            calls["dispatch"] += 1

    sys.setprofile(count)
    try:
        got = torch.func.grad(lambda w: fn(x, w))(w.detach())
    finally:
        sys.setprofile(None)
    assert calls["dispatch"] > 0
    np.testing.assert_array_equal(got.numpy(), eager)
    want = dense_tanh_chain_gradient(4, x.numpy(), w.detach().numpy())[1]
    np.testing.assert_allclose(eager, want, rtol=1e-4, atol=1e-5)


def test_an_eager_graph_keeps_autograd_rules():
    """The direct path keeps PyTorch's rules: a graph kept with ``retain_graph`` runs its backward
    twice (gradients add), a freed one refuses a second backward, and a weight changed in place after
    the forward is an error at the backward, not a wrong gradient."""
    fn = _chain(3)
    x, w = _data()
    want = dense_tanh_chain_gradient(3, x.numpy(), w.detach().numpy())[1]
    loss = fn(x, w)
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * want, rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    loss = fn(x, w)
    with torch.no_grad():
        w.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
