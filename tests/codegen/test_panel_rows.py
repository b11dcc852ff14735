"""A side packed by its own function, read contiguously along the panel's rows: per ``k``, a
whole panel in one loop of constant trips.

Attention's ``dK = (0.125 dS)^T Q`` and ``dV = (E / s)^T dO`` reach the micro-kernel with side
A an expression (a product, a quotient) read along its rows ``j``.  The packer walked such a
side per ``k`` through the general run machinery -- outer digits decomposed and a run's end
tested for each 4-element row of a panel -- and those products took 1.4x the time of the plain
``dS^T Q``.  A full panel inside one run of the last outer axis is now packed per ``k`` by a
loop of ``width`` trips (one vector load and store; ``Packer._pack_rows``); a partial panel, or
one that straddles a run of its last outer axis, keeps the general walk.

Oracles: the products written here in NumPy (float64), at sizes whose panels are partial and
whose rows span two axes (panels straddling runs), on the host, AVX2 and SSE targets.
"""

import numpy as np
import pytest
import torch  # (a test extra: tests/test_extras_installed.py)
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorad as ta

TARGETS = ("llvm", "llvm -mcpu=haswell", "llvm -mcpu=x86-64")


def _products(b, s, rows, d, dtype):
    """``rows``: the output rows' axes (one or two); returns (outputs, inputs, references)."""
    nrow = int(np.prod(rows))
    DS = ta.placeholder((b, s) + rows, dtype, "DS")
    S = ta.placeholder((b, s), dtype, "S")
    Q = ta.placeholder((b, s, d), dtype, "Q")

    def out(body, name):
        k = ta.reduce_axis((0, s), "k")
        if len(rows) == 1:
            return ta.compute((b,) + rows + (d,), lambda n, r, e: ta.sum(body(n, k, (r,), e), k), name)
        return ta.compute((b,) + rows + (d,), lambda n, r0, r1, e: ta.sum(body(n, k, (r0, r1), e), k), name)

    scaled = out(lambda n, k, r, e: DS[(n, k) + r] * 0.125 * Q[n, k, e], "scaled")
    divided = out(lambda n, k, r, e: Q[n, k, e] * (DS[(n, k) + r] / S[n, k]), "divided")
    rng = np.random.default_rng(b * 100 + nrow)
    vals = [rng.standard_normal(t.shape).astype(dtype) for t in (DS, S, Q)]
    vals[1] = np.abs(vals[1]) + 0.5
    ds, sv, q = (v.astype(np.float64) for v in vals)
    ds = ds.reshape(b, s, nrow)
    want = [np.einsum("nkr,nke->nre", 0.125 * ds, q), np.einsum("nkr,nke->nre", ds / sv[:, :, None], q)]
    shape = (b,) + rows + (d,)
    return [scaled, divided], [DS, S, Q], vals, [w.reshape(shape) for w in want]


def test_a_panel_in_one_run_is_packed_by_a_loop_of_constant_trips():
    outs, ins, _, _ = _products(2, 40, (32,), 16, "float32")
    kern = ta.build(outs, ins, microkernel=True)
    assert "micro-kernel" in str(kern.lowered)
    assert "pf.body" in kern.llvm_ir_unoptimized  # the per-k loop over a panel's rows


@settings(max_examples=12, deadline=None)
@given(b=st.integers(1, 3), s=st.integers(1, 70),
       rows=st.sampled_from([(37,), (64,), (3, 5), (6, 7), (2, 12)]),
       d=st.integers(1, 30), dtype=st.sampled_from(["float32", "float64"]), spec=st.sampled_from(TARGETS))
def test_products_with_expression_sides_read_along_rows(b, s, rows, d, dtype, spec):
    outs, ins, vals, want = _products(b, s, rows, d, dtype)
    kern = ta.build(outs, ins, microkernel=True, parallel_min_work=0, target=spec)
    tol = 1e-4 if dtype == "float32" else 1e-11
    for threads in (1, 2):
        kern.num_threads = threads
        for got, ref in zip(kern(*vals), want):
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("spec", TARGETS)
def test_attention_gradients_against_torch(spec):
    rng = np.random.default_rng(3)
    shapes = (2, 70, 16)
    q, k, v, h = (rng.standard_normal(shapes).astype("float32") for _ in range(4))
    Q, K, V = (ta.placeholder(shapes, "float32", n) for n in "QKV")
    f = ta.function(ta.topi.nn.scaled_dot_product_attention(Q, K, V), [Q, K, V], wrt=[Q, K, V],
                    target=spec, checked=True)
    _, res = f.forward(q, k, v)
    got = f.backward(res, h)
    tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    out = torch.softmax(tq @ tk.transpose(1, 2) / 4.0, -1) @ tv
    want = torch.autograd.grad(out, (tq, tk, tv), torch.tensor(h, dtype=torch.float64))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-4, atol=1e-5)
