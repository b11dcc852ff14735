"""``ta.torch.function``: tensorad programs as PyTorch operators.

Oracles: ``torch.autograd.gradcheck``/``gradgradcheck`` (float64 finite differences taken by
PyTorch), and the same computation written with PyTorch's own operators (eager autograd,
``torch.func.grad``, ``torch.compile``).  Every topi op goes through the bridge, at first and
second order: the gradient test table (``tests/tensorad/topi/test_topi_gradients.py``), the
layers table (``test_topi_layers.py``) and the few ops neither takes.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

import tensorad as ta

torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
nn = ta.topi.nn


def _load(name: str, module_name: str) -> dict:
    path = pathlib.Path(__file__).parents[1] / "tensorad" / "topi" / name
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


topi = ta.topi
# the ops that neither table below takes (elementwise math, broadcasting, shape changes)
_MORE = {
    "abs": ([(2, 3)], topi.abs, None),
    "sin": ([(2, 3)], topi.sin, None),
    "cos": ([(2, 3)], topi.cos, None),
    "power": ([(2, 3), (2, 3)], topi.power, "pos"),
    "maximum": ([(2, 3), (3,)], topi.maximum, None),
    "minimum": ([(2, 3), (2, 1)], topi.minimum, None),
    "broadcast_to": ([(3, 1)], lambda X: topi.broadcast_to(X, (2, 3, 4)), None),
    "expand_dims": ([(2, 3)], lambda X: topi.expand_dims(X, 1, 2), None),
    "squeeze": ([(2, 1, 3)], lambda X: topi.squeeze(X, 1), None),
}
# every topi op: the gradient table, the layers table (norms, GELU, grouped and transposed
# convolution, upsampling, attention), and the ops above
CASES = {**_load("test_topi_gradients.py", "topi_gradient_cases"), **_MORE,
         **{k: (v[0], v[1], None) for k, v in _load("test_topi_layers.py", "topi_layer_cases").items()}}


def _inputs(shapes, domain, gen, dtype=torch.float64):
    if domain == "pos":
        return [(0.5 + torch.rand(s, generator=gen, dtype=dtype)).requires_grad_() for s in shapes]
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]


@pytest.mark.parametrize("case", list(CASES))
def test_gradcheck_and_gradgradcheck_of_every_topi_op(case):
    """First order through the saved residuals; second order through tensorad's own
    derivatives of the gradient program (create_graph)."""
    shapes, build, domain = CASES[case]
    xs = [ta.placeholder(s, "float64", f"in{k}") for k, s in enumerate(shapes)]
    f = ta.torch.function(build(*xs), xs)
    args = _inputs(shapes, domain, torch.Generator().manual_seed(7))
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-6, rtol=1e-5)
    # second order: random projections of the Hessian (fast mode), each against finite differences
    assert torch.autograd.gradgradcheck(f, args, eps=1e-6, atol=1e-6, rtol=1e-5, fast_mode=True)


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_gradcheck_of_the_losses_with_integer_labels(loss, reduction):
    X, L = ta.placeholder((3, 4), "float64", "X"), ta.placeholder((3,), "int32", "L")
    f = ta.torch.function(getattr(ta.topi.nn, loss)(X, L, reduction=reduction, ignore_index=2), [X, L])
    x = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).requires_grad_()
    labels = torch.tensor([1, 2, 3], dtype=torch.int32)  # the second is ignored
    torch.testing.assert_close(f(x, labels), getattr(torch.nn.functional, loss)(
        x, labels.long(), reduction=reduction, ignore_index=2))
    assert torch.autograd.gradcheck(lambda x: f(x, labels), (x,), eps=1e-6, atol=1e-6, rtol=1e-5)
    assert torch.autograd.gradgradcheck(lambda x: f(x, labels), (x,), eps=1e-6, atol=1e-6, rtol=1e-5)


# the gathers, with integer indices (repeated, so the scatter-add of the gradient accumulates)
_GATHERS = {
    "take": (lambda X, J: topi.take(X, J, axis=1), (3, 5), (4,), lambda x, i: x[:, i]),
    "index_select": (lambda X, J: topi.index_select(X, J, axis=0), (5, 3), (4,), lambda x, i: x[i]),
    "embedding": (lambda W, J: ta.topi.nn.embedding(W, J), (6, 3), (2, 4),
                  lambda w, i: torch.nn.functional.embedding(i.long(), w)),
    "embedding_bag": (lambda W, J: ta.topi.nn.embedding_bag(W, J, "sum"), (6, 3), (2, 4),
                      lambda w, i: torch.nn.functional.embedding_bag(i.long(), w, mode="sum")),
}


@pytest.mark.parametrize("case", list(_GATHERS))
def test_gradcheck_and_gradgradcheck_of_the_gathers(case):
    build, shape, ishape, reference = _GATHERS[case]
    X, J = ta.placeholder(shape, "float64", "X"), ta.placeholder(ishape, "int32", "J")
    f = ta.torch.function(build(X, J), [X, J])
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).requires_grad_()
    idx = torch.tensor([[1, 3, 1, 0], [2, 2, 0, 1]][: ishape[0]] if len(ishape) == 2 else [1, 2, 1, 0],
                       dtype=torch.int32)
    torch.testing.assert_close(f(x, idx), reference(x, idx))
    assert torch.autograd.gradcheck(lambda x: f(x, idx), (x,), eps=1e-6, atol=1e-6, rtol=1e-5)
    assert torch.autograd.gradgradcheck(lambda x: f(x, idx), (x,), eps=1e-6, atol=1e-6, rtol=1e-5)


def _layer(dtype="float32"):
    """conv2d (padding 1) -> relu -> 2x2 max pool, as one tensorad function of X and W."""
    X, W = ta.placeholder((2, 2, 6, 6), dtype, "X"), ta.placeholder((3, 2, 3, 3), dtype, "W")
    Y = nn.pool(nn.relu(nn.conv2d(X, W, 1, 1)), 2, 2, 0, "max")
    return ta.torch.function(Y, [X, W])


def _layer_torch(x, w):
    F = torch.nn.functional
    return F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2, 2)


@pytest.fixture(scope="module")
def layer():
    return _layer()


def _data(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(2, 2, 6, 6, generator=gen), torch.randn(3, 2, 3, 3, generator=gen)


def test_eager_forward_and_backward_match_pytorch(layer):
    x, w = _data()
    head = torch.randn(2, 3, 3, 3, generator=torch.Generator().manual_seed(1))
    got = [t.clone().requires_grad_() for t in (x, w)]
    want = [t.clone().requires_grad_() for t in (x, w)]
    y = layer(*got)
    torch.testing.assert_close(y, _layer_torch(*want))
    y.backward(head)
    _layer_torch(*want).backward(head)
    for g, r in zip(got, want):
        torch.testing.assert_close(g.grad, r.grad, rtol=1e-5, atol=1e-5)


def test_torch_compile_fullgraph():
    """No graph break (fullgraph=True raises on one); values and gradients as in eager mode."""
    layer = _layer()  # a fresh one: its first call is traced by torch.compile

    def loss(x, w):
        return (layer(x, w) ** 2).sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    x, w = _data(2)
    got = [t.clone().requires_grad_() for t in (x, w)]
    want = [t.clone().requires_grad_() for t in (x, w)]
    value = compiled(*got)
    value.backward()
    ref = (_layer_torch(*want) ** 2).sum()
    ref.backward()
    torch.testing.assert_close(value, ref, rtol=1e-5, atol=1e-5)
    for g, r in zip(got, want):
        torch.testing.assert_close(g.grad, r.grad, rtol=1e-5, atol=1e-5)


def test_torch_func_grad(layer):
    x, w = _data(3)
    got = torch.func.grad(lambda x, w: layer(x, w).sum(), argnums=(0, 1))(x, w)
    want = torch.func.grad(lambda x, w: _layer_torch(x, w).sum(), argnums=(0, 1))(x, w)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_the_registered_operator_has_autograd_and_a_fake_implementation(layer):
    key = layer.operator().key
    x, w = (t.clone().requires_grad_() for t in _data(4))
    y, *extras = torch.ops.tensorad.forward(key, [x, w])
    assert [e.requires_grad for e in extras] == [False] * len(extras)
    y.sum().backward()
    xr, wr = (t.clone().requires_grad_() for t in _data(4))
    _layer_torch(xr, wr).sum().backward()
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-5, atol=1e-5)
    from torch._subclasses.fake_tensor import FakeTensorMode

    plain = [x.detach(), w.detach()]
    with FakeTensorMode() as mode:
        fake = torch.ops.tensorad.forward(key, [mode.from_tensor(t) for t in plain])
    assert tuple(fake[0].shape) == (2, 3, 3, 3) and fake[0].dtype == torch.float32


def test_outputs_share_memory_with_what_the_kernel_wrote(layer):
    """The forward writes straight into torch tensors (DLPack): nothing is copied back."""
    x, w = _data(5)
    y = layer(x, w)
    assert y.is_contiguous() and y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), _layer_torch(x, w).numpy(), rtol=1e-5, atol=1e-6)


def test_several_outputs_and_an_unused_one():
    A, B = ta.placeholder((3, 4), "float64", "A"), ta.placeholder((4, 2), "float64", "B")
    f = ta.torch.function([ta.topi.matmul(A, B), ta.topi.sum(ta.topi.exp(A), axis=1)], [A, B])
    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b: f(a, b)[0], (a.requires_grad_(), b.requires_grad_()))
    assert torch.autograd.gradcheck(lambda a, b: f(a, b)[1], (a, b))
    assert torch.autograd.gradcheck(lambda a, b: f(a, b), (a, b))


def test_bad_arguments_are_clear_errors(layer):
    x, w = _data()
    with pytest.raises(TypeError, match="takes 2 tensors \\(X, W\\), got 1"):
        layer(x)
    with pytest.raises(TypeError, match="input W: expected dtype torch.float32, got torch.float64"):
        layer(x, w.double())
    with pytest.raises(ValueError, match="input X: expected shape \\[2, 2, 6, 6\\], got \\[1, 2, 6, 6\\]"):
        layer(x[:1], w)
    with pytest.raises(TypeError, match="input X: expected a torch.Tensor, got ndarray"):
        layer(x.numpy(), w)


def test_only_the_gradients_asked_for_are_computed():
    """Data that does not require grad gets no gradient kernel; inference saves nothing."""
    f = _layer()
    x, w = _data(6)
    w.requires_grad_()
    f(x, w).sum().backward()
    op = f._operators[(False, True)]
    assert op.function.wrt == [f.function.inputs[1]]
    assert op.function.lower_backward().work < f.operator().function.lower_backward().work
    xr, wr = x.clone(), w.detach().clone().requires_grad_()
    _layer_torch(xr, wr).sum().backward()
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        f(x, w)
    assert f.operator([False, False]).function.saved == ()


def test_the_saved_values_get_no_zero_filled_heads(layer):
    """The forward's saved values (the convolution, the pool's winner) are outputs of the
    registered operator that no loss reads: autograd must not allocate and zero-fill a head for
    each of them on every backward (megabytes of memset per training step)."""
    from torch.profiler import ProfilerActivity, profile

    x, w = (t.clone().requires_grad_() for t in _data(7))
    y = layer(x, w)
    head = torch.randn(y.shape, generator=torch.Generator().manual_seed(8))
    assert len(layer.operator().function.plan.extras) >= 2  # (else the test shows nothing)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        y.backward(head)
    fills = [e.key for e in prof.key_averages() if e.key in ("aten::zeros", "aten::zero_", "aten::fill_")]
    assert fills == [], fills
    xr, wr = (t.clone().requires_grad_() for t in _data(7))
    _layer_torch(xr, wr).backward(head)
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-5)


def test_saved_values_travel_as_one_block_and_outputs_are_new_every_call():
    """The forward operator returns the outputs and one tensor of bytes holding the saved values that
    are not outputs, however many layers save one; outputs kept from a call keep their values through
    later calls, and one backward through two calls' graphs gives PyTorch's gradient."""
    X, W = ta.placeholder((4, 8), name="X"), ta.placeholder((8, 8), name="W")
    h = X
    for _ in range(6):
        h = ta.topi.tanh(nn.dense(h, W))
    f = ta.torch.function(h, [X, W], wrt=[W])
    gen = torch.Generator().manual_seed(3)
    x1, x2 = torch.rand(4, 8, generator=gen), torch.rand(4, 8, generator=gen)
    w = ((torch.rand(8, 8, generator=gen) - 0.5) * 1.2).requires_grad_()
    y, *rest = torch.ops.tensorad.forward(f.operator().key, [x1, w])
    assert len(rest) == 1 and rest[0].dtype == torch.uint8 and rest[0].dim() == 1
    y1 = f(x1, w)
    kept = y1.detach().clone()
    y2 = f(x2, w)
    assert not np.shares_memory(y1.detach().numpy(), y2.detach().numpy())
    torch.testing.assert_close(y1.detach(), kept, rtol=0, atol=0)
    (y1.sum() + 2 * y2.sum()).backward()

    def chain(x, w):
        for _ in range(6):
            x = torch.tanh(x @ w.T)
        return x

    wr = w.detach().clone().requires_grad_()
    (chain(x1, wr).sum() + 2 * chain(x2, wr).sum()).backward()
    torch.testing.assert_close(y1.detach(), chain(x1, wr).detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-5, atol=1e-5)
