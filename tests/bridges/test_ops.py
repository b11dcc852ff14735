"""``@ta.torch.op`` and ``@ta.jax.op``: a tensorad layer in one line.

Oracles: the same layers written with PyTorch's and JAX's own operators (a model trained with
an optimizer on batches of several sizes, losses step by step; ``jax.grad`` of the pure JAX
layer), ``torch.autograd.gradcheck`` (float64 finite differences taken by PyTorch), and
``weakref`` for what an evicted signature leaves behind.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import tensorad as ta

torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
nn = ta.topi.nn
F = torch.nn.functional


@ta.torch.op
def dense_tanh(X, W, B):
    return ta.topi.tanh(nn.dense(X, W, B))


@ta.torch.op(num_threads=1)
def conv(X, W, *, stride=1, padding=1):
    return nn.conv2d(X, W, stride, padding)


class _Model(torch.nn.Module):
    """dense -> tanh -> dense, the first layer a decorated tensorad function (or PyTorch's)."""

    def __init__(self, tensorad: bool) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(16, 8, generator=gen) * 0.3)
        self.b1 = torch.nn.Parameter(torch.zeros(16))
        self.out = torch.nn.Linear(16, 3)
        torch.nn.init.normal_(self.out.weight, generator=gen)
        torch.nn.init.zeros_(self.out.bias)
        self.tensorad = tensorad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = dense_tanh(x, self.w1, self.b1) if self.tensorad else torch.tanh(F.linear(x, self.w1, self.b1))
        return self.out(h)


def _train(tensorad: bool, sizes: list[int]) -> list[float]:
    model = _Model(tensorad)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for step in range(20):
        n = sizes[step % len(sizes)]
        x = torch.randn(n, 8, generator=gen)
        y = x[:, :3].argmax(1)  # a rule the model can learn
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_a_decorated_layer_trains_like_pytorch_on_batches_of_five_sizes():
    sizes = [4, 7, 1, 12, 5]
    got, want = _train(True, sizes), _train(False, sizes)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert np.mean(got[-5:]) < np.mean(got[:5])
    assert len(dense_tanh.families) == 1  # dynamic=None: the batches after the first share one trace


def test_many_shapes_keep_at_most_max_signatures_alive():
    """Twelve shapes through a cache of three: each new one evicts the oldest, whose function
    (and kernels) is then freed -- whatever the number of shapes, three stay alive."""
    @ta.torch.op(max_signatures=3, dynamic=False)
    def double(X):
        return ta.topi.multiply(X, 2.0)

    refs = []
    for n in range(1, 13):
        x = torch.randn(n, requires_grad=True)
        double(x).sum().backward()
        assert torch.equal(x.grad, torch.full((n,), 2.0))
        refs.append(weakref.ref(next(reversed(double.signatures._entries.values()))))
        assert len(double.signatures) <= 3
    gc.collect()
    assert sum(r() is not None for r in refs) == 3


def test_torch_compile_fullgraph_with_shapes_not_seen_before():
    """Nothing runs eagerly first: each new shape is traced (and built) under torch.compile."""
    @ta.torch.op
    def layer(X, W):
        return nn.pool(nn.relu(nn.conv2d(X, W, 1, 1)), 2, 2, 0, "max")

    def loss(x, w):
        return (layer(x, w) ** 2).sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(3, 2, 3, 3, generator=gen)
    for n in (2, 3):
        x = torch.randn(n, 2, 6, 6, generator=gen)
        got = [t.clone().requires_grad_() for t in (x, w)]
        want = [t.clone().requires_grad_() for t in (x, w)]
        value = compiled(*got)
        value.backward()
        ref = (F.max_pool2d(F.relu(F.conv2d(want[0], want[1], padding=1)), 2) ** 2).sum()
        ref.backward()
        torch.testing.assert_close(value, ref, rtol=1e-5, atol=1e-4)
        for g, r in zip(got, want):
            torch.testing.assert_close(g.grad, r.grad, rtol=1e-5, atol=1e-4)


def test_gradcheck_and_double_backward_in_float64_with_static_keywords():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 7, 7, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    torch.testing.assert_close(conv(x, w, stride=2), F.conv2d(x, w, stride=2, padding=1))
    assert torch.autograd.gradcheck(lambda a, b: conv(a, b, stride=2), (x, w))
    assert torch.autograd.gradgradcheck(lambda a, b: conv(a, b, stride=2, padding=0), (x, w),
                                        fast_mode=True)
    assert len({k[1] for k in conv.signatures._entries}) == 2  # the static values are in the key


def test_channels_last_and_strided_inputs():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 6, 6, generator=gen).to(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(5, 3, 3, 3, generator=gen)[:, :, :, :].transpose(2, 3).requires_grad_()
    assert not x.is_contiguous() and not w.is_contiguous()
    y = conv(x, w)
    xr, wr = (t.detach().clone().requires_grad_() for t in (x, w))
    ref = F.conv2d(xr, wr, padding=1)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    y.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-5, atol=1e-5)


def test_no_grad_builds_no_backward_and_gradients_only_where_asked():
    @ta.torch.op
    def layer(X, W, B):
        return ta.topi.tanh(nn.dense(X, W, B))

    x, w, b = torch.randn(3, 4), torch.randn(2, 4), torch.randn(2)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, w, b), torch.tanh(F.linear(x, w, b)))
    (function,) = layer.signatures._entries.values()
    assert list(function._operators) == [(True, True, True), (False, False, False)]
    assert "backward_kernel" not in vars(function.operator().function)
    w.requires_grad_()
    layer(x, w, b).sum().backward()
    assert (False, True, False) in function._operators and w.grad is not None


def test_several_outputs_come_back_as_a_tuple_one_as_a_value():
    @ta.torch.op
    def two(X):
        return ta.topi.exp(X), ta.topi.sum(X)

    @ta.torch.op
    def one(X):
        return (ta.topi.exp(X),)

    x = torch.linspace(-1, 1, 5)
    e, s = two(x)
    torch.testing.assert_close(e, x.exp())
    torch.testing.assert_close(s, x.sum())
    torch.testing.assert_close(one(x), x.exp())


def test_bad_calls_are_clear_errors():
    with pytest.raises(TypeError, match="argument 0 must be a torch.Tensor"):
        dense_tanh(np.ones((2, 8)), torch.ones(16, 8), torch.ones(16))
    with pytest.raises(TypeError, match="static value must be a Python number"):
        conv(torch.ones(1, 1, 3, 3), torch.ones(1, 1, 3, 3), stride=torch.tensor(1))

    @ta.torch.op
    def not_a_tensor(X):
        return 3

    with pytest.raises(TypeError, match="must return a tensorad tensor"):
        not_a_tensor(torch.ones(2))


def test_torch_func_grad_through_an_op():
    x, w, b = torch.randn(3, 8), torch.randn(16, 8), torch.randn(16)
    got = torch.func.grad(lambda w: dense_tanh(x, w, b).sum())(w)
    want = torch.func.grad(lambda w: torch.tanh(F.linear(x, w, b)).sum())(w)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# ---- JAX ------------------------------------------------------------------------------------
def test_jax_op_under_jit_grad_and_vmap():
    jax = pytest.importorskip("jax", reason="an optional extra; make test requires it")
    jnp = jax.numpy

    @ta.jax.op
    def layer(X, W, B):
        return ta.topi.tanh(nn.dense(X, W, B))

    def pure(x, w, b):
        return jnp.tanh(x @ w.T + b)

    rng = np.random.default_rng(5)
    w, b = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in ((4, 3), (4,)))
    for n in (2, 5):
        x = jnp.asarray(rng.standard_normal((n, 3)), jnp.float32)
        got = jax.jit(jax.grad(lambda x, w, b: (layer(x, w, b) ** 2).sum(), argnums=(1, 2)))(x, w, b)
        want = jax.grad(lambda x, w, b: (pure(x, w, b) ** 2).sum(), argnums=(1, 2))(x, w, b)
        for g, r in zip(got, want):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
    xs = jnp.asarray(rng.standard_normal((6, 2, 3)), jnp.float32)
    np.testing.assert_allclose(jax.vmap(lambda x: layer(x, w, b))(xs),
                               jax.vmap(lambda x: pure(x, w, b))(xs), rtol=1e-5, atol=1e-6)
    # (2, 3) alone, then a family over the batch for 5; vmap traces one example: (2, 3) again
    assert len(layer.signatures) == 1 and len(layer.families) == 1


def test_jax_op_dtype_rules():
    jax = pytest.importorskip("jax", reason="an optional extra; make test requires it")

    @ta.jax.op
    def widen(X):
        return ta.compute(X.shape, lambda i: ta.cast("float64", X[i]))

    @ta.jax.op
    def double(X):
        return ta.topi.multiply(X, 2.0)

    with jax.enable_x64(False):
        assert double(np.ones(3)).dtype == np.float32  # JAX's rule: float64 is float32 here
        with pytest.raises(TypeError, match="jax_enable_x64"):
            widen(np.ones(3, np.float32))
    with jax.enable_x64(True):
        assert double(np.ones(3)).dtype == np.float64
        np.testing.assert_array_equal(widen(np.ones(3, np.float32)), np.ones(3))
