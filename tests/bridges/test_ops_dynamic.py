"""``ta.torch.op(dynamic=...)``: which calls share one trace of the function over size variables.

Oracles: the same layers written with PyTorch's own operators in float64 (values and gradients);
the traces are counted by the decorated function itself."""

from __future__ import annotations

import pickle

import pytest

import tensorad as ta

torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
nn = ta.topi.nn


def _counted(fn, calls):
    def traced(*args, **kwargs):
        calls.append([tuple(t.shape) for t in args])
        return fn(*args, **kwargs)
    traced.__name__ = fn.__name__
    return traced


def _dense_tanh(X, W, B):
    return ta.topi.tanh(nn.dense(X, W, B))


def _batch(n, gen):
    return [torch.randn(*s, dtype=torch.float64, generator=gen, requires_grad=True)
            for s in ((n, 5), (4, 5), (4,))]


@pytest.mark.parametrize("dynamic, traces", [(None, 3), (True, 2), (False, 4)])
def test_values_and_gradients_at_batch_sizes_match_pytorch(dynamic, traces):
    calls = []
    layer = ta.torch.op(_counted(_dense_tanh, calls), dynamic=dynamic)
    gen = torch.Generator().manual_seed(0)
    for n in (3, 7, 64, 1):
        got = _batch(n, gen)
        want = [t.detach().clone().requires_grad_() for t in got]
        y = layer(*got)
        ref = torch.tanh(torch.nn.functional.linear(*want))
        torch.testing.assert_close(y, ref)
        (y * ref.detach()).sum().backward()
        (ref * ref.detach()).sum().backward()
        for g, w in zip(got, want):
            torch.testing.assert_close(g.grad, w.grad)
    # None: 3 alone, then one family of batches, 1 alone; True: one family, 1 in a family of its own
    assert len(calls) == traces
    assert layer.why == ""
    if dynamic is not False:
        (pattern, _), *_ = [k for k, _ in layer.families.items()]
        shapes = [dims for dims, _ in pattern]
        # None: the batch varies, the features stay fixed; True: every size, W's 5 shared with X's
        assert shapes == ([("s0", 5), (4, 5), (4,)] if dynamic is None else
                          [("s0", "s1"), ("s2", "s1"), ("s2",)])
    else:
        assert len(layer.families) == 0 and len(layer.signatures) == 4


def _row_loss(L, T):
    return ta.topi.sum(ta.topi.exp(L), axis=1) - T


def test_equal_dimensions_share_a_size_and_a_broken_equality_is_a_new_family():
    calls = []
    loss = ta.torch.op(_counted(_row_loss, calls))
    gen = torch.Generator().manual_seed(1)
    for n in (3, 6, 11):
        L = torch.randn(n, 5, dtype=torch.float64, generator=gen)
        T = torch.randn(n, dtype=torch.float64, generator=gen)
        torch.testing.assert_close(loss(L, T), L.exp().sum(1) - T)
    (pattern, _), = [k for k, _ in loss.families.items()]
    assert pattern == ((("s0", 5), "float64"), (("s0",), "float64"))  # one batch size for both
    assert len(calls) == 2
    with pytest.raises((TypeError, ValueError)):  # the family needs L and T of one batch; so does fn itself
        loss(torch.randn(4, 5, dtype=torch.float64), torch.randn(7, dtype=torch.float64))
    assert len(loss.families) == 2  # the broken equality made a family of its own (s0, s1)
    assert "not traceable" in loss.why  # fn's own shapes disagree there: built per signature


def _totals(L, T):
    return ta.topi.sum(L) + ta.topi.sum(T)


def test_sizes_free_of_each_other_serve_calls_that_break_an_equality():
    calls = []
    total = ta.torch.op(_counted(_totals, calls))
    for shapes in (((3, 2), (3,)), ((5, 2), (5,)), ((4, 2), (7,)), ((6, 2), (2,)), ((5, 2), (5,))):
        L, T = torch.randn(*shapes[0], dtype=torch.float64), torch.randn(*shapes[1], dtype=torch.float64)
        torch.testing.assert_close(total(L, T), L.sum() + T.sum())
    assert len(calls) == 3 and len(total.families) == 2 and total.why == ""


def _needs_ints(X):
    n = int(X.shape[0])  # a Python int: not traceable over a size
    return ta.compute((n,), lambda i: X[i, 0] * float(n))


def test_a_function_needing_static_sizes_falls_back_per_shape_and_stays_right():
    calls = []
    first = ta.torch.op(_counted(_needs_ints, calls), dynamic=True)
    for n in (2, 5, 9, 5):
        x = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
        y = first(x)
        torch.testing.assert_close(y, x[:, 0] * n)
        y.sum().backward()
        torch.testing.assert_close(x.grad[:, 0], torch.full((n,), float(n), dtype=torch.float64))
    assert "not traceable over sizes" in first.why
    assert len(first.signatures) == 3  # one static function per shape


def test_dynamic_is_kept_by_pickling_and_checked():
    layer = ta.torch.op(_dense_tanh, dynamic=True)
    assert pickle.loads(pickle.dumps(layer)).dynamic is True
    with pytest.raises(TypeError, match="dynamic must be None, False or True"):
        ta.torch.op(_dense_tanh, dynamic="auto")


def test_jax_op_shares_a_trace_across_batch_sizes():
    jax = pytest.importorskip("jax", reason="an optional extra; make test requires it")
    import numpy as np
    calls = []
    layer = ta.jax.op(_counted(_dense_tanh, calls))
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((4, 5), dtype=np.float32), rng.standard_normal(4, dtype=np.float32)
    for n in (3, 7, 2):
        x = rng.standard_normal((n, 5), dtype=np.float32)
        got = jax.jit(layer)(x, w, b)
        np.testing.assert_allclose(np.asarray(got), np.tanh(x @ w.T + b), rtol=1e-5, atol=1e-6)
    assert len(calls) == 2


def test_a_family_keeps_as_many_sizes_as_an_op_keeps_signatures():
    """A family's function keeps one static function per size; it kept 8 where an op keeps 32
    signatures, so a model cycling through more batch sizes compiled each again."""
    layer = ta.torch.op(_dense_tanh)
    gen = torch.Generator().manual_seed(2)
    sizes = range(2, 14)
    for n in sizes:
        layer(*_batch(n, gen))
    (family,) = [f for _, f in layer.families.items()]
    assert len(family.function.static) == len(sizes) - 1  # (the first size was built alone)


def _squeezed_exp(X):
    return ta.topi.squeeze(ta.topi.exp(X))


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_dimension_of_1_is_not_served_by_a_family_traced_over_sizes(dynamic):
    """A family's size admitted 1, but its trace had read ``s == 1`` as false: ``squeeze`` kept the
    axis, so after calls of batch 3 and 5 a batch of 1 came out ``(1, 4)`` where the function gives
    ``(4,)`` (as a first call of batch 1 did).  A dimension of 1 is now traced as itself.  Oracle:
    PyTorch's ``exp(x).squeeze()``."""
    op = ta.torch.op(_squeezed_exp, dynamic=dynamic)
    gen = torch.Generator().manual_seed(3)
    for n in (3, 5, 1, 6):
        x = torch.randn(n, 4, dtype=torch.float64, generator=gen)
        torch.testing.assert_close(op(x), x.exp().squeeze())
