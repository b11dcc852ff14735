"""Size variables as isl parameters (``tensorad.poly``): sets hold at every admissible size, results
read the size back as its ``Expr``; and the operators that then take a symbolic extent, against NumPy
float64 at sizes 1, 7 and 64."""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest
from tensorad.simplify.algebra.consts import evaluate_scalar

import tensorad as ta
from tensorad.ir import Op, var
from tensorad.ir.expr import SizeDecisionError
from tensorad.ir.rewrite import tensor_graph, walk
from tensorad.ir.tensor import Role
from tensorad.poly.affine import IndexSpace, always, decide, size_cases
from tensorad.poly.domain import IndexSet
from tensorad.symbolic import DeferredCall

SIZES = (1, 7, 64)
RNG = np.random.default_rng(1)


def test_static_space_has_no_parameters():
    i = var("i", 0, 8)
    space = IndexSpace([i])
    s = space.cond(~(i < 3))
    assert not space.params and s.dim(isl.dim_type.param) == 0


def test_sets_over_a_size_hold_at_every_admissible_size():
    n = ta.size_var("n")
    i = var("i", 0, n)
    assert not IndexSet.from_conditions([i], []).is_empty()
    assert IndexSet.from_conditions([i], [i >= n]).is_empty()
    assert not IndexSet.from_conditions([i], [i >= 1]).is_empty()  # nonempty at n >= 2
    assert always(n >= 1) and not always(n >= 2) and always(ta.size_var("m", min=2) >= 2)


def test_multiple_of_is_a_constraint_of_the_parameter():
    m = ta.size_var("m", multiple_of=2)
    i = var("i", 0, m)
    assert IndexSet.from_conditions([i], [2 * i + 1 == m]).is_empty()
    assert not IndexSet.from_conditions([i], [2 * i == m]).is_empty()
    assert always(m % 2 == 0) and not always(ta.size_var("k") % 2 == 0)


def test_complement_stays_at_admissible_sizes():
    n = ta.size_var("n", min=3, max=5)
    assert always(~(n < 3)) and always(~(n > 5))
    assert IndexSpace([]).cond(~(n <= 5)).is_empty()


@pytest.mark.parametrize("size", SIZES)
def test_solution_reads_the_size_back(size):
    n = ta.size_var("n")
    i, k = var("i", 0, n), var("k", 0, n)
    sol = IndexSet.from_conditions([i, k], [i + k == n - 1]).solve(k)
    assert sol is not None and sol.pieces == 1
    for x in {0, size // 2, size - 1}:
        assert evaluate_scalar(sol.value, {i: x, n: size}) == size - 1 - x


@pytest.mark.parametrize("size", SIZES)
def test_condition_of_a_set_reads_the_size_back(size):
    n = ta.size_var("n")
    i = var("i", 0, n)
    cond = IndexSet.from_conditions([i], [i + 2 < n]).to_cond()
    assert any(x is n for x in walk(cond) if x.op is Op.VAR)
    assert [x for x in range(size) if evaluate_scalar(cond, {i: x, n: size})] == list(range(size - 2))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_mean_over_a_symbolic_axis_divides_by_the_size(axis, size):
    n = ta.size_var("n")
    X = ta.placeholder((n, 6), name="X")
    M = ta.topi.mean(X, axis=axis)
    x = RNG.standard_normal((size, 6)).astype("float32")
    np.testing.assert_allclose(ta.evaluate(M, {X: x}), x.astype("float64").mean(axis), rtol=1e-5, atol=1e-6)
    (g,) = ta.JacobianRecursive(ta.topi.sum(M), [X])
    count = {None: 6 * size, 0: size, 1: 6}[axis]
    np.testing.assert_allclose(ta.evaluate(g, {X: x}), np.full((size, 6), 1 / count), rtol=1e-6)


def test_variance_whose_divisor_depends_on_the_size_divides_by_it():
    n = ta.size_var("n")
    X = ta.placeholder((n, 8), name="X")
    V = ta.topi.var(X, axis=0, ddof=1)  # n - 1 may be 0: NaN there, as NumPy's
    for size in (1, 5):
        x = RNG.standard_normal((size, 8)).astype("float32")
        x64 = x.astype("float64")
        with np.errstate(all="ignore"):
            want = ((x64 - x64.mean(axis=0)) ** 2).sum(axis=0) / np.float64(size - 1)
        np.testing.assert_allclose(ta.evaluate(V, {X: x}), want, rtol=1e-5, equal_nan=True)


def window_extreme_oracle(x, h, kind):
    """``d sum_i H[i] * max_k X[i, k] / dX`` (or min): the head split evenly over each row's ties."""
    best = x.max(1, keepdims=True) if kind == "max" else x.min(1, keepdims=True)
    win = x == best
    return h[:, None] * win / win.sum(1, keepdims=True)


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("optimize", [False, True])
def test_max_and_min_over_a_symbolic_window_gradient_at_each_size(kind, optimize):
    """The window's extent is the size: the winner's flat index is the window point, unbounded in int32
    terms, so it is kept per axis; evaluated and built at each size."""
    m = ta.size_var("m")
    X, H = ta.placeholder((3, m), name="X"), ta.placeholder((3,), name="H")
    k = ta.reduce_axis((0, m), "k")
    reduce = ta.max if kind == "max" else ta.min
    Y = ta.compute((3,), lambda i: reduce(X[i, k], axis=k), name="Y")
    (g,) = ta.JacobianRecursive(Y, [X], H, optimize=optimize)
    kernel = ta.build(g, [X, H])
    for size in SIZES:
        x = RNG.integers(0, 3, (3, size)).astype("float32")  # ties in most rows
        h = RNG.standard_normal(3).astype("float32")
        want = window_extreme_oracle(x.astype("float64"), h.astype("float64"), kind)
        np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), want, rtol=1e-6)
        np.testing.assert_allclose(kernel(x, h), want, rtol=1e-6)


@pytest.mark.parametrize("optimize", [False, True])
def test_gather_whose_extent_is_a_size_and_its_gradient(optimize):
    n = ta.size_var("n")
    X, idx = ta.placeholder((n,), name="X"), ta.placeholder((4,), "int32", name="I")
    Y = ta.compute((4,), lambda i: X.take(idx[i], mode="clip") * X[idx[i] % 1], name="Y")
    (g,) = ta.JacobianRecursive(ta.topi.sum(Y), [X], optimize=optimize)
    for size in SIZES:
        x, ix = RNG.standard_normal(size).astype("float32"), np.array([-1, 0, 3, 99], "int32")
        hit = np.clip(ix, 0, size - 1)
        np.testing.assert_array_equal(ta.evaluate(Y, {X: x, idx: ix}), x[hit] * x[0])
        want = np.zeros(size)
        np.add.at(want, hit, x[0])
        want[0] += x[hit].astype("float64").sum()
        np.testing.assert_allclose(ta.evaluate(g, {X: x, idx: ix}), want, rtol=1e-5, atol=1e-6)


def test_decide_holds_at_every_size_or_names_the_size():
    n = ta.size_var("n")
    assert decide(n >= 1) and not decide(n < 1) and decide(ta.size_var("m", min=2) > 1)
    with pytest.raises(SizeDecisionError, match=r"size variables n \(\(n > 1\)\) that depends") as e:
        decide(n > 1)
    assert e.value.condition is not None


def test_decide_compares_products_of_sizes_as_polynomials():
    """isl holds no product of two sizes; a comparison whose difference is a polynomial with terms of one
    sign is decided from the sizes' minimums, and any other still names its sizes."""
    n, L, m = ta.size_var("n"), ta.size_var("L"), ta.size_var("m", min=3)
    assert decide(n * L >= L * n) and decide(n * L + n > 2 * n * L - L * n) and decide(m * L >= 3)
    assert not decide(n * L < n * L) and not decide(n * L != L * n) and not decide(n * L <= n * L - 1)
    assert decide(2 * (n * L) == n * L + L * n) and not decide(n * L == n * L + 1)
    for open_ in (n * L >= 2, n * n >= 2 * n, m * L > 3 * L - 1):
        with pytest.raises(SizeDecisionError):
            decide(open_)


def test_size_cases_are_the_intervals_isl_gives():
    n, m = ta.size_var("n"), ta.size_var("m", multiple_of=2)
    assert size_cases(n > 1) == (n, [(1, 1), (2, None)])
    assert size_cases(n - 3 > 3) == (n, [(1, 6), (7, None)])
    assert size_cases(m > 4) == (m, [(2, 4), (6, None)])
    assert size_cases(n % 2 == 0) is None  # not intervals
    assert size_cases((n > 1) & (m > 1)) is None  # two sizes


def layer_programs(n):
    X, G, B = ta.placeholder((n, 6), name="X"), ta.placeholder((6,), name="G"), ta.placeholder((6,), name="B")
    yield "layer_norm", ta.topi.nn.layer_norm(X, G, B), [X, G, B]
    X = ta.placeholder((n, 2, 6, 6), name="X")
    yield "max_pool", ta.topi.nn.pool(X, 2, 2, 0, "max"), [X]


def redone_at_bind(tensors):
    """Whether binding redoes a differentiation on the static program (no derivative over the sizes)."""
    return any(not t.is_placeholder and t.op.provenance.role is Role.DEFERRED
               and isinstance(t.op.provenance.source[0], DeferredCall) for t in tensor_graph(tensors))


@pytest.mark.parametrize("case", ["layer_norm", "max_pool"])
def test_optimized_gradient_over_sizes_has_the_static_work_and_bits_at_each_size(case):
    """The optimizer runs over the sizes (per case of their values where a choice depends on them, as a
    one-row batch): bound at each size, the gradient has the work and the bits of the gradient of the
    program written at that size.  (The dense layer's, the convolution's and the softmax's, with their
    NumPy oracles: tests/tensorad/test_size_vars.py.)"""
    name, Y, inputs = next(p for p in layer_programs(ta.size_var("n")) if p[0] == case)
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.JacobianRecursive(Y, inputs, H)
    assert not redone_at_bind(grads)
    target = "llvm -mcpu=skylake-avx512"
    for size in SIZES:
        bound = ta.bind([*grads, Y, H, *inputs], n=size)
        g, (Y_b, H_b, *ins) = bound[:len(grads)], bound[len(grads):]
        static = ta.JacobianRecursive(Y_b, ins, H_b)
        work = [ta.lower(d, [*ins, H_b], target=target).work for d in (g, static)]
        assert work[0] == work[1]
        feed = {t: RNG.standard_normal(t.shape).astype("float32") for t in [*ins, H_b]}
        for got, want in zip(ta.evaluate(g, feed), ta.evaluate(static, feed)):
            np.testing.assert_array_equal(got, want)


def test_attention_over_a_batch_and_a_length_is_differentiated_once(monkeypatch):
    """Causal attention over a batch ``b`` and a length ``L``: the optimizer compares the costs of its
    contraction orders as polynomials in the sizes (``b * L`` against ``b * L``), so no choice depends on
    their values, the gradient is made once, over both sizes, and binding differentiates nothing.
    Bound, it has the bits of the gradient written at those sizes, and its work where a query sees more
    than one key (at ``L = 1`` the softmax's sums over one key stay sums)."""
    import tensorad.autodiff as autodiff

    made, real = [], autodiff.jacobian_recursive
    monkeypatch.setattr(autodiff, "jacobian_recursive", lambda *a, **k: made.append(1) or real(*a, **k))
    b, L = ta.size_var("b"), ta.size_var("L")
    Q = ta.placeholder((b, 2, L, 2), name="Q")
    A = ta.topi.nn.scaled_dot_product_attention(Q, Q, Q, causal=True)
    Y = ta.topi.sum(A * A)
    (g,) = ta.JacobianRecursive(Y, [Q])
    assert len(made) == 1
    assert not any(not t.is_placeholder and t.op.provenance.role is Role.DEFERRED for t in tensor_graph([g]))
    target = "llvm -mcpu=skylake-avx512"
    for sizes in ((1, 1), (2, 1), (1, 3), (2, 3)):
        before = len(made)
        g_b, Y_b, Q_b = ta.bind([g, Y, Q], b=sizes[0], L=sizes[1])
        assert len(made) == before, f"binding {sizes} differentiated"
        (static,) = ta.JacobianRecursive(Y_b, [Q_b])
        if sizes[1] > 1:
            assert ta.lower(g_b, [Q_b], target=target).work == ta.lower(static, [Q_b], target=target).work
        q = RNG.standard_normal(Q_b.shape).astype("float32")
        np.testing.assert_array_equal(ta.evaluate(g_b, {Q_b: q}), ta.evaluate(static, {Q_b: q}))


def test_a_case_deferred_again_is_given_up_before_its_own_cases_are_made(monkeypatch):
    """A sum over a batch ``b`` and a length ``L`` (a weight's gradient): whether ``b`` is one row splits
    the derivative into cases, and in each case whether ``L`` is one point defers it again, so the cases
    are given up (their own cases never made) and the derivative is redone at binding.  Bound, the
    gradient matches NumPy's formula."""
    import tensorad.autodiff as autodiff

    made, real = [], autodiff.jacobian_recursive
    monkeypatch.setattr(autodiff, "jacobian_recursive", lambda *a, **k: made.append(1) or real(*a, **k))
    b, L = ta.size_var("b"), ta.size_var("L")
    X, W = ta.placeholder((b, L, 3), name="X"), ta.placeholder((3,), name="W")
    Y = ta.topi.tanh(ta.compute((b, L, 3), lambda i, j, k: X[i, j, k] * W[k], name="XW"))
    H = ta.placeholder(Y.shape, name="H")
    (g,) = ta.JacobianRecursive(Y, [W], H)
    assert redone_at_bind([g]) and len(made) <= 3
    for sizes in ((1, 1), (2, 3)):
        g_b, X_b, W_b, H_b = ta.bind([g, X, W, H], b=sizes[0], L=sizes[1])
        x, w, h = (RNG.standard_normal(t.shape) for t in (X_b, W_b, H_b))
        got = ta.evaluate(g_b, {X_b: x.astype("float32"), W_b: w.astype("float32"), H_b: h.astype("float32")})
        np.testing.assert_allclose(got, (h * (1 - np.tanh(x * w) ** 2) * x).sum((0, 1)), rtol=1e-4, atol=1e-5)


def test_binding_the_other_size_keeps_the_cases_of_one(monkeypatch):
    """A gradient over a batch ``n`` and a length ``L`` whose optimizer's choices depend on ``n`` only
    (a sum over the batch of one row or more) is made per case of ``n``'s values.  Binding ``L`` alone,
    as a generic kernel over ``n`` is made at each length, binds those cases: no differentiation again
    at any length.  Bound at ``n`` too, each gradient matches NumPy's formula."""
    import tensorad.autodiff as autodiff

    made, real = [], autodiff.jacobian_recursive
    monkeypatch.setattr(autodiff, "jacobian_recursive", lambda *a, **k: made.append(1) or real(*a, **k))
    n, L = ta.size_var("n"), ta.size_var("L")
    X, W = ta.placeholder((n, L, 3), name="X"), ta.placeholder((L, 3), name="W")
    Y = ta.topi.tanh(ta.compute((n, L, 3), lambda i, j, k: X[i, j, k] * W[j, k], name="XW"))
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.JacobianRecursive(Y, [X, W], H)
    assert any(not t.is_placeholder and t.op.provenance.role is Role.DEFERRED for t in tensor_graph(grads))
    differentiated = len(made)
    for length in (3, 4):
        *over_n, X_l, W_l, H_l = ta.bind([*grads, X, W, H], n=n, L=length)
        assert len(made) == differentiated, f"binding L={length} differentiated"
        for size in (1, 2, 5):
            dX, dW, X_b, W_b, H_b = ta.bind([*over_n, X_l, W_l, H_l], n=size)
            x, w, h = (RNG.standard_normal(t.shape) for t in (X_b, W_b, H_b))
            got = ta.evaluate([dX, dW], {X_b: x.astype("float32"), W_b: w.astype("float32"),
                                         H_b: h.astype("float32")})
            d = h * (1 - np.tanh(x * w) ** 2)
            np.testing.assert_allclose(got[0], d * w, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(got[1], (d * x).sum(0), rtol=1e-4, atol=1e-5)
    kernel = ta.build(grads, [X, W, H]).at(L=3)  # (a generic kernel over n at a length, of the cases bound)
    assert kernel.generic and len(made) == differentiated
    for size in (1, 5):
        x, w, h = (RNG.standard_normal(s).astype("float32") for s in ((size, 3, 3), (3, 3), (size, 3, 3)))
        d = h * (1 - np.tanh(x * w) ** 2)
        for got, want in zip(kernel(x, w, h), (d * w, (d * x).sum(0))):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [("n", -1), ("n", 24), (-1,), ("n", 6, 4)])
def test_reshape_over_a_symbolic_batch_and_its_gradient(shape):
    n = ta.size_var("n")
    X = ta.placeholder((n, 2, 3, 4), name="X")
    R = ta.topi.reshape(X, tuple(n if s == "n" else s for s in shape))
    H = ta.placeholder(R.shape, name="H")
    (g,) = ta.JacobianRecursive(R, [X], H)
    for size in SIZES:
        x = RNG.standard_normal((size, 2, 3, 4)).astype("float32")
        want = x.reshape([size if s == "n" else s for s in shape])
        np.testing.assert_array_equal(ta.evaluate(R, {X: x}), want)
        h = RNG.standard_normal(want.shape).astype("float32")
        np.testing.assert_array_equal(ta.evaluate(g, {X: x, H: h}), h.reshape(x.shape))


@pytest.mark.slow
def test_torch_function_of_a_symbolic_program_at_each_size():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 8), name="X"), ta.placeholder((5, 8), name="W")
    f = ta.torch.function(ta.topi.nn.softmax(ta.topi.nn.dense(X, W)), [X, W])
    for size in SIZES:
        x64, w64 = (torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in ((size, 8), (5, 8)))
        x, w = (t.detach().float().requires_grad_() for t in (x64, w64))
        h = torch.randn(size, 5, dtype=torch.float64)
        torch.testing.assert_close(f(x, w).double(), torch.softmax(x64 @ w64.T, 1), rtol=1e-5, atol=1e-6)
        (f(x, w).double() * h).sum().backward()
        (torch.softmax(x64 @ w64.T, 1) * h).sum().backward()
        for got, want in ((x.grad, x64.grad), (w.grad, w64.grad)):
            torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_jax_function_of_a_symbolic_program_at_each_size():
    jax = pytest.importorskip("jax", reason="an optional extra; make test requires it")
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 8), name="X"), ta.placeholder((5, 8), name="W")
    f = ta.jax.function(ta.topi.nn.dense(X, W), [X, W])
    for size in SIZES:
        x, w = (RNG.standard_normal(s).astype("float32") for s in ((size, 8), (5, 8)))
        np.testing.assert_allclose(f(x, w), x.astype("float64") @ w.T, rtol=1e-5, atol=1e-5)
        gx, gw = jax.grad(lambda x, w: (f(x, w) ** 2).sum(), argnums=(0, 1))(x, w)
        y = x.astype("float64") @ w.T
        np.testing.assert_allclose(gx, 2 * y @ w, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(gw, 2 * y.T @ x, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bound_mean_is_the_mean_written_at_that_size(dtype):
    """Binding folds ``1 / float64(n)`` into the constant the static program holds: the same work and
    bits."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 6), dtype, name="X")
    M = ta.topi.mean(ta.topi.exp(X), axis=0)
    target = "llvm -mcpu=skylake-avx512"
    for size in SIZES:
        M_b, X_b = ta.bind([M, X], n=size)
        X_s = ta.placeholder((size, 6), dtype, name="X")
        M_s = ta.topi.mean(ta.topi.exp(X_s), axis=0)
        assert ta.lower(M_b, [X_b], target=target).work == ta.lower(M_s, [X_s], target=target).work
        x = RNG.standard_normal((size, 6)).astype(dtype)
        np.testing.assert_array_equal(ta.evaluate(M_b, {X_b: x}), ta.evaluate(M_s, {X_s: x}))


def test_binding_one_of_two_sizes_keeps_the_other():
    """A program bound at ``b`` and given ``L`` itself keeps ``L`` symbolic and reads ``b``'s value."""
    b, L = ta.size_var("b"), ta.size_var("L")
    X = ta.placeholder((b, L, 3), name="X")
    Y = ta.compute((b, L), lambda i, j: X[i, j, 0] * X[b - 1 - i, L - 1 - j, 2], name="Y")
    Yb, Xb = ta.bind([Y, X], b=2, L=L)
    assert Xb.shape[0] == 2 and Xb.shape[1] is L and Yb.shape == (2, L)
    x = RNG.standard_normal((2, 5, 3)).astype("float32")
    np.testing.assert_allclose(ta.evaluate(Yb, {Xb: x}), x[..., 0] * x[::-1, ::-1, 2], rtol=1e-6)
