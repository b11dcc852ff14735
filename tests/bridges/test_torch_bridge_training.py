"""``ta.torch.function`` as a training loop uses it.

A layer that returns an integer output beside its values (an argmax, as ``torch.max`` returns
indices), a layer whose output is changed in place after the call (``out += identity`` in a
residual block, ``relu_``), a module holding a function deep-copied or saved: each against the
same layer written in PyTorch, float64.
"""

import copy
import io

import numpy as np
import pytest
import torch  # (a test dependency: `make test` installs tensorad[torch])

import tensorad as ta  # noqa: E402
from tensorad import topi  # noqa: E402

D = torch.float64


def _argmax_and_max(rows: int, cols: int):
    x = ta.placeholder((rows, cols), "float64", "X")
    argmax = ta.comm_reducer(
        lambda a, b: (ta.select(a[1] >= b[1], a[0], b[0]), ta.select(a[1] >= b[1], a[1], b[1])),
        lambda t0, t1: (ta.const(-1, t0), ta.const(-np.inf, t1)), name="argmax")
    r = ta.reduce_axis((0, cols), "r")
    index, value = ta.compute((rows,), lambda i: argmax((r, x[i, r]), axis=r), name="am")
    return x, index, value


def test_an_integer_output_beside_a_float_one_backpropagates():
    x, index, value = _argmax_and_max(4, 5)
    f = ta.torch.function([index, value], [x])
    a = torch.tensor(np.random.default_rng(0).standard_normal((4, 5)), requires_grad=True)
    i, v = f(a)
    (v ** 2).sum().backward()
    expected = torch.zeros_like(a)
    expected[torch.arange(4), a.argmax(1)] = 2 * a.max(1).values
    assert torch.equal(i.long(), a.argmax(1))
    assert torch.allclose(a.grad, expected)
    a.grad = None
    i, v = f(a)  # double backward: the gradient program's own operator
    (g,) = torch.autograd.grad(v.pow(3).sum(), a, create_graph=True)
    g.sum().backward()
    expected = torch.zeros_like(a)
    expected[torch.arange(4), a.argmax(1)] = 6 * a.max(1).values
    assert torch.allclose(a.grad, expected)


def test_an_output_changed_in_place_after_the_call_keeps_the_gradient():
    # a convolution's backward reads its inputs, not its output: PyTorch lets a residual
    # block add the identity into it in place, and so must the bridge
    X = ta.placeholder((1, 2, 5, 5), "float64", "X")
    W = ta.placeholder((2, 2, 3, 3), "float64", "W")
    conv = ta.torch.function(topi.nn.conv2d(X, W, 1, 1), [X, W])
    rng = np.random.default_rng(1)
    x = torch.tensor(rng.standard_normal((1, 2, 5, 5)), requires_grad=True)
    w = torch.tensor(rng.standard_normal((2, 2, 3, 3)), requires_grad=True)
    out = conv(x, w)
    out += x
    torch.relu_(out)
    out.pow(2).sum().backward()
    x2, w2 = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    ref = torch.relu(torch.nn.functional.conv2d(x2, w2, padding=1) + x2)
    ref.pow(2).sum().backward()
    assert torch.allclose(x.grad, x2.grad) and torch.allclose(w.grad, w2.grad)


def test_an_input_changed_in_place_that_the_backward_does_not_read():
    E = ta.placeholder((3,), "float64", "E")
    double = ta.torch.function(topi.multiply(E, 2.0), [E])
    e = torch.tensor([0.5, -1.0, 2.0], dtype=D, requires_grad=True)
    i = e * 1
    o = double(i)
    i.add_(1)
    (g,) = torch.autograd.grad(o.sum(), e, create_graph=True)
    assert torch.equal(g, torch.full((3,), 2.0, dtype=D))


def test_an_output_the_backward_reads_is_still_guarded_against_in_place_changes():
    # exp's gradient reads its output: PyTorch's own exp refuses the same program
    E = ta.placeholder((3,), "float64", "E")
    exp = ta.torch.function(topi.exp(E), [E], policy="save_all")
    saves_output = any(kind == "output" for kind, _ in exp.operator().function.plan.sources)
    e = torch.tensor([0.5, -1.0, 2.0], dtype=D, requires_grad=True)
    o = exp(e)
    o.add_(1)
    if saves_output:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            o.sum().backward()
    else:  # recomputed from the input: nothing to guard
        o.sum().backward()
        assert torch.allclose(e.grad, e.detach().exp())


class _Layer(torch.nn.Module):
    """A module holding a tensorad function as an attribute (pickled with it)."""

    def __init__(self):
        super().__init__()
        X = ta.placeholder((2, 3), "float64", "X")
        W = ta.placeholder((4, 3), "float64", "W")
        self.w = torch.nn.Parameter(torch.arange(12, dtype=D).reshape(4, 3) / 10)
        self.f = ta.torch.function(topi.tanh(topi.nn.dense(X, W)), [X, W])

    def forward(self, x):
        return self.f(x, self.w)


def test_a_module_holding_a_function_is_deep_copied_and_saved():
    layer = _Layer()
    x = torch.linspace(-1, 1, 6, dtype=D).reshape(2, 3)
    expected = torch.tanh(x @ layer.w.detach().T)
    ema = copy.deepcopy(layer)  # an EMA copy, a checkpoint
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    for m in (ema, loaded):
        y = m(x)
        y.sum().backward()
        assert torch.allclose(y, expected)
        assert torch.allclose(m.w.grad, ((1 - expected ** 2).T @ x))
    assert layer.w.grad is None
