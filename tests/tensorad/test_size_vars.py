"""Size variables (``ta.size_var``): programs written once with a symbolic batch, bound, evaluated and
differentiated at sizes 1, 7 and 33, against NumPy formulas in float64."""

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir.rewrite import tensor_graph
from tensorad.ir.tensor import Role
from tensorad.lang.sizes import program_sizes
from tensorad.symbolic import DeferredCall

SIZES = (1, 7, 33)  # (the raw gradient of a convolution evaluates in time quadratic in the size)
RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def dense_program(n=None):
    """``dense`` over a batch of ``n`` rows (default: a size variable)."""
    n = ta.size_var("n") if n is None else n
    X, W, B = (ta.placeholder(s, name=x) for s, x in (((n, 8), "X"), ((5, 8), "W"), ((5,), "B")))
    return ta.topi.nn.dense(X, W, B), [X, W, B]


def dense_oracle(x, w, b, h):
    x, w, h = (a.astype("float64") for a in (x, w, h))
    return x @ w.T + b, [h @ w, h.T @ x, h.sum(0)]


def conv_program():
    n = ta.size_var("n")
    X, K = ta.placeholder((n, 2, 6, 6), name="X"), ta.placeholder((3, 2, 3, 3), name="K")
    return ta.topi.nn.conv2d(X, K, padding=1), [X, K]


def conv_oracle(x, k, h):
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # b c y x ky kx
    y = np.einsum("bcyxij,ocij->boyx", win, k)
    dk = np.einsum("boyx,bcyxij->ocij", h, win)
    dxp = np.zeros_like(xp)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + 6, j:j + 6] += np.einsum("boyx,oc->bcyx", h, k[:, :, i, j])
    return y, [dxp[:, :, 1:-1, 1:-1], dk]


def softmax_program():
    n = ta.size_var("n")
    X = ta.placeholder((n, 6), name="X")
    return ta.topi.nn.softmax(X), [X]


def softmax_oracle(x, h):
    e = np.exp(x - x.max(1, keepdims=True))
    s = e / e.sum(1, keepdims=True)
    return s, [s * (h - (h * s).sum(1, keepdims=True))]


CASES = {
    "dense": (dense_program, lambda n: [rand(n, 8), rand(5, 8), rand(5)], dense_oracle),
    "conv": (conv_program, lambda n: [rand(n, 2, 6, 6), rand(3, 2, 3, 3)], conv_oracle),
    "softmax": (softmax_program, lambda n: [rand(n, 6)], softmax_oracle),
}


def loss_and_gradient(Y, inputs):
    """``sum(Y * H)`` and its symbolic gradient (the optimizer needs static sizes)."""
    H = ta.placeholder(Y.shape, name="H")
    loss = ta.topi.sum(Y * H)
    return H, ta.JacobianRecursive(loss, inputs, optimize=False)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("n", SIZES)
def test_forward_and_gradient_evaluated_at_each_size(case, n):
    program, arrays, oracle = CASES[case]
    Y, inputs = program()
    H, grads = loss_and_gradient(Y, inputs)
    values = arrays(n)
    h = rand(n, *Y.shape[1:])
    want_y, want_grads = oracle(*values, h)
    feed = dict(zip(inputs, values))
    np.testing.assert_allclose(ta.evaluate(Y, feed), want_y, rtol=1e-4, atol=1e-4)
    for got, want in zip(ta.evaluate(grads, {**feed, H: h}), want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES)
def test_bound_symbolic_gradient_equals_gradient_of_bound_program(case):
    program, arrays, _ = CASES[case]
    Y, inputs = program()
    H, grads = loss_and_gradient(Y, inputs)
    bound = ta.bind([*grads, Y, H, *inputs], n=7)
    grads_b, (Y_b, H_b, *inputs_b) = bound[:len(grads)], bound[len(grads):]
    static = ta.JacobianRecursive(ta.topi.sum(Y_b * H_b), inputs_b)
    feed = {**dict(zip(inputs_b, arrays(7))), H_b: rand(*H_b.shape)}
    for a, b in zip(ta.evaluate(grads_b, feed), ta.evaluate(static, feed)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_shapes_and_printing_show_sizes_by_name():
    n, m = ta.size_var("n"), ta.size_var("m")
    X = ta.placeholder((n, m), name="X")
    k = ta.reduce_axis((0, m), "k")
    Y = ta.compute((n,), lambda i: ta.sum(X[i, k], axis=k) / m, name="Y")
    assert [str(s) for s in Y.shape] == ["n"]
    text = ta.PrintTensorRecursively(Y)
    assert "[n]" in text and "(m - 1)" in text and "float32(m)" in text


def test_bind_substitutes_sizes_everywhere():
    n = ta.size_var("n")
    X = ta.placeholder((n, 3), name="X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((3,), lambda j: ta.sum(X[k, j], axis=k) / n, name="Y")
    Y7, X7 = ta.bind([Y, X], n=7)
    assert X7.shape == (7, 3) and Y7.shape == (3,)
    assert not program_sizes([Y7]) and "[7, 3]" in ta.PrintTensorRecursively(Y7)
    x = rand(7, 3)
    np.testing.assert_allclose(ta.evaluate(Y7, {X7: x}), x.mean(0), rtol=1e-5)
    assert ta.bind(Y7) is Y7  # a static program is returned unchanged
    Y5 = ta.bind(Y, {X: rand(5, 3)})  # sizes read from arrays
    assert ta.bind(Y5) is Y5


def test_bind_checks_each_size_and_names_it():
    n = ta.size_var("n", min=2, max=100, multiple_of=4)
    X = ta.placeholder((n,), name="X")
    with pytest.raises(ValueError, match=r"size n = 1 is outside its admissible range \[2, 100\]"):
        ta.bind(X, n=1)
    with pytest.raises(ValueError, match=r"size n = 104 is outside"):
        ta.bind(X, n=104)
    with pytest.raises(ValueError, match="size n = 6 is not a multiple of 4"):
        ta.bind(X, n=6)
    with pytest.raises(ValueError, match="no value given for size n"):
        ta.bind(X)
    with pytest.raises(ValueError, match="has no size named m"):
        ta.bind(X, n=8, m=3)
    Y = ta.compute((n,), lambda i: X[i] + ta.placeholder((ta.size_var("n"),), name="Z")[0], name="Y")
    with pytest.raises(ValueError, match="two size variables named 'n'"):
        ta.bind(Y, n=8)


def test_a_size_the_program_lacks_is_refused_where_a_user_binds_it():
    """Binding inside a build skips a size a derivative's case no longer reads; a size a user names is
    checked against the program where it binds a program (``kernel.at`` reads the sizes it has)."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 3), "float64", name="X")
    Y = ta.compute((n,), lambda i: X[i, 0] * X[n - 1 - i, 2], name="Y")  # (rows not independent)
    for call in (lambda: ta.lower(Y, [X], sizes={"n": 2, "m": 1}), lambda: ta.function(Y, [X]).at(n=2, m=1)):
        with pytest.raises(ValueError, match="has no size named m"):
            call()
    kernel = ta.build(Y, [X])
    assert kernel.at(n=2, m=1) is kernel.at(n=2)
    with pytest.raises(ValueError, match="no value given for size n"):
        kernel.at(m=1)
    n = ta.size_var("n")
    X = ta.placeholder((n,), name="X")
    with pytest.raises(ta.OutOfBoundsError, match="leaves \\[0, n\\) at i=0, n=1"):
        ta.compute((n,), lambda i: X[i + 1], name="Y")
    ta.compute((n - 1,), lambda i: X[i + 1], name="Y")
    m = ta.size_var("m", multiple_of=2)
    P = ta.placeholder((m,), name="P")
    ta.compute((m // 2,), lambda i: P[2 * i + 1], name="Q")  # odd m would break it


def test_arrays_disagreeing_on_a_size_name_both_arrays():
    n = ta.size_var("n")
    X, V = ta.placeholder((n, 4), name="X"), ta.placeholder((n,), name="V")
    Y = ta.compute((n, 4), lambda i, j: X[i, j] * V[i], name="Y")
    with pytest.raises(ValueError, match=r"disagree on size n: X gives 3, V gives 5"):
        ta.evaluate(Y, {X: rand(3, 4), V: rand(5)})


def redone_at_bind(tensors):
    """Whether binding redoes a differentiation on the static program (no derivative over the sizes)."""
    return any(not t.is_placeholder and t.op.provenance.role is Role.DEFERRED
               and isinstance(t.op.provenance.source[0], DeferredCall) for t in tensor_graph(tensors))


@pytest.mark.parametrize("case", CASES)
def test_optimized_gradient_of_symbolic_program_is_the_static_programs_at_each_size(case):
    """``JacobianRecursive`` with the optimizer on a symbolic program runs over the sizes (binding
    differentiates nothing again): bound at a size, it is the optimized gradient of the program written
    at that size (the same work, no more than the raw gradient's, and the same bits), with the oracle's
    values.  (The layer norm's and the max pool's: tests/tensorad/test_size_params.py.)"""
    program, arrays, oracle = CASES[case]
    Y, inputs = program()
    H = ta.placeholder(Y.shape, name="H")
    grads, raw = ta.JacobianRecursive(Y, inputs, H), ta.JacobianRecursive(Y, inputs, H, optimize=False)
    assert not redone_at_bind(grads)
    target = "llvm -mcpu=skylake-avx512"
    for n in (1, 7, 64):
        bound = ta.bind([*grads, *raw, Y, H, *inputs], n=n)
        g, r, (Y_b, H_b, *ins) = bound[:len(grads)], bound[len(grads):2 * len(grads)], bound[2 * len(grads):]
        static = ta.JacobianRecursive(Y_b, ins, H_b)
        work = ta.lower(g, [*ins, H_b], target=target).work
        assert work == ta.lower(static, [*ins, H_b], target=target).work
        if n < 64:  # (the raw gradient's work, lowered at two sizes)
            raw_work = ta.lower(r, [*ins, H_b], target=target).work
            assert work < raw_work if case == "conv" else work <= raw_work  # (the raw conv sums over zeros)
        values, h = arrays(n), rand(n, *Y.shape[1:])
        feed = {**dict(zip(ins, values)), H_b: h}
        got = ta.evaluate(g, feed)
        for a, b in zip(got, ta.evaluate(static, feed)):
            np.testing.assert_array_equal(a, b)
        for a, want in zip(got, oracle(*values, h)[1]):
            np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-4)


def test_optimized_derivatives_of_symbolic_program_built_once_run_each_size():
    """``Jacobian``, ``jvp`` and the Hessian-vector product with the optimizer: one built kernel
    runs each size, with the oracle's values, and a second-order derivative of a deferred one works."""
    n = ta.size_var("n")
    X, V = ta.placeholder((n, 3), name="X"), ta.placeholder((n, 3), name="V")
    loss = ta.topi.sum(ta.topi.tanh(X))
    (Hv,) = ta.hessian_vector_product(loss, [X], [V])
    (dX,) = ta.JacobianRecursive(loss, [X])
    J = ta.jvp(ta.topi.sum(dX), [X], [V])  # forward over a deferred gradient: sum(V * tanh'')
    kernel = ta.build([Hv, J], [X, V])
    for size in (1, 7):
        x, v = rand(size, 3), rand(size, 3)
        t = np.tanh(x.astype("float64"))
        hv, j = kernel(x, v)
        np.testing.assert_allclose(hv, -2 * t * (1 - t * t) * v, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(j, (-2 * t * (1 - t * t) * v).sum(), rtol=1e-4, atol=1e-5)


def test_jvp_of_symbolic_program():
    Y, (X,) = softmax_program()
    T = ta.placeholder(X.shape, name="T")
    J = ta.jvp(Y, [X], [T], optimize=False)
    x, t = rand(7, 6), rand(7, 6)
    s, _ = softmax_oracle(x.astype("float64"), t)
    want = s * (t - (s * t).sum(1, keepdims=True))
    np.testing.assert_allclose(ta.evaluate(J, {X: x, T: t}), want, rtol=1e-4, atol=1e-5)


def test_size_var_arguments_checked():
    with pytest.raises(ValueError, match="max 1 is below min 2"):
        ta.size_var("n", min=2, max=1)
    with pytest.raises(ValueError, match="multiple_of must be an int >= 1"):
        ta.size_var("n", multiple_of=0)


def test_two_sizes_dense_and_its_jacobian():
    n, m = ta.size_var("n"), ta.size_var("m")
    X, W = ta.placeholder((n, m), name="X"), ta.placeholder((5, m), name="W")
    Y = ta.topi.nn.dense(X, W)
    J = ta.Jacobian(Y, W, optimize=False)
    x, w = rand(3, 4), rand(5, 4)
    np.testing.assert_allclose(ta.evaluate(Y, {X: x, W: w}), x @ w.T, rtol=1e-5, atol=1e-6)
    want = np.einsum("jp,ik->ijpk", np.eye(5), x)  # dY[i, j] / dW[p, k]
    np.testing.assert_allclose(ta.evaluate(J, {X: x, W: w}), want, rtol=1e-6)


def test_jvp_of_reduction_empty_at_some_points_matches_bound_program():
    """A running max over ``k < i`` is empty at ``i = 0``: its tangent's gate holds there at every size."""
    n = ta.size_var("n")
    X, T = ta.placeholder((n,), name="X"), ta.placeholder((n,), name="T")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((n,), lambda i: ta.max(ta.exp(X[k]), axis=k, where=k < i), name="Y")
    L = ta.compute((n,), lambda i: ta.log(Y[i]), name="L")
    J = ta.jvp(L, [X], [T], optimize=False)
    for size in (1, 7):
        L_b, X_b, T_b = ta.bind([L, X, T], n=size)
        x, t = rand(size), rand(size)
        want = ta.evaluate(ta.jvp(L_b, [X_b], [T_b]), {X_b: x, T_b: t})
        got = ta.evaluate(J, {X: x, T: t})
        assert got[0] == 0.0
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_attention_with_symbolic_sequence_length_gradient_matches_bound_program():
    n = ta.size_var("n")
    Q, K, V = (ta.placeholder((2, n, 4), name=c) for c in "QKV")
    Y = ta.topi.nn.scaled_dot_product_attention(Q, K, V, causal=True)
    grads = ta.JacobianRecursive(ta.topi.sum(Y), [Q, K, V], optimize=False)
    bound = ta.bind([*grads, Y, Q, K, V], n=5)
    static = ta.JacobianRecursive(ta.topi.sum(bound[3]), bound[4:])
    feed = {t: rand(2, 5, 4) for t in bound[4:]}
    for a, b in zip(ta.evaluate(bound[:3], feed), ta.evaluate(static, feed)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_hessian_vector_product_of_symbolic_program():
    n = ta.size_var("n")
    X, V = ta.placeholder((n, 3), name="X"), ta.placeholder((n, 3), name="V")
    loss = ta.topi.sum(ta.topi.tanh(X))
    (Hv,) = ta.hessian_vector_product(loss, [X], [V], optimize=False)
    x, v = rand(7, 3).astype("float64"), rand(7, 3)
    t = np.tanh(x)
    np.testing.assert_allclose(ta.evaluate(Hv, {X: x.astype("float32"), V: v}), -2 * t * (1 - t * t) * v,
                               rtol=1e-4, atol=1e-5)


def max_rows_oracle(x, h):
    """``d sum(H * max_k X[i, k]) / dX``: the head split evenly over the tied winners of each row."""
    win = x == x.max(1, keepdims=True)
    return h[:, None] * win / win.sum(1, keepdims=True)


@pytest.mark.parametrize("optimize", [False, True])
def test_max_over_symbolic_rows_gradient_at_each_size(optimize):
    """A max whose outputs have a symbolic extent: the winner's landing point is a gather whose
    extent is the size, bound with the program."""
    n = ta.size_var("n")
    X, H = ta.placeholder((n, 4), name="X"), ta.placeholder((n,), name="H")
    k = ta.reduce_axis((0, 4), "k")
    Y = ta.compute((n,), lambda i: ta.max(X[i, k], axis=k), name="Y")
    (g,) = ta.JacobianRecursive(Y, [X], H, optimize=optimize)
    for size in SIZES:
        x = RNG.integers(0, 3, (size, 4)).astype("float32")  # ties in most rows
        h = rand(size)
        np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), max_rows_oracle(x, h), rtol=1e-6)


@pytest.mark.parametrize("optimize", [False, True])
@pytest.mark.parametrize("reduce", ["max", "argmax"])
def test_winner_of_a_window_over_a_symbolic_extent_not_starting_at_0(reduce, optimize):
    """A max (or argmax) over ``k`` in ``[1, n)``, ``n`` unbounded: its winner's index may not fit an
    int32, so the winner recorded the point ``k`` itself, which the gradient decoded as an offset from
    the window's start: the head landed one column to the right.  Oracle: NumPy, the first maximum
    of each row's window (ties among small integers)."""
    n = ta.size_var("n", min=2)
    X, H = ta.placeholder((3, n), "float64", name="X"), ta.placeholder((3,), "float64", name="H")
    k = ta.reduce_axis((1, n), "k")
    if reduce == "max":
        Y = ta.compute((3,), lambda i: ta.max(X[i, k] * 2.0, axis=k), name="Y")
    else:
        def pick(a, b):
            keep = a[1] >= b[1]
            return ta.select(keep, a[0], b[0]), ta.select(keep, a[1], b[1])
        argmax = ta.comm_reducer(pick, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")
        Y = ta.compute((3,), lambda i: argmax((k, X[i, k] * 2.0), axis=k), name="Y")[1]
    (g,) = ta.JacobianRecursive(Y, [X], H, optimize=optimize)
    for size in (2, 6):
        x = RNG.permutation(3 * size).reshape(3, size).astype("float64")  # (distinct: one winner a row)
        h = RNG.standard_normal(3)
        want = np.zeros((3, size))
        want[np.arange(3), 1 + x[:, 1:].argmax(1)] = 2.0 * h
        np.testing.assert_array_equal(ta.evaluate(g, {X: x, H: h}), want)


def test_a_scalar_in_sizes_is_an_operand_of_elementwise_ops():
    """``topi.multiply(loss, -1.0 / n)`` (a mean written by hand) scales by the bound size; an
    expression in index variables or reads is refused, as any non-number."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 3), name="X")
    Y = ta.topi.multiply(ta.topi.sum(X, axis=1), -1.0 / n)
    x = rand(5, 3)
    np.testing.assert_allclose(ta.evaluate(Y, {X: x}), -x.sum(1) / 5, rtol=1e-5)
    np.testing.assert_allclose(ta.build(Y, [X])(x), -x.sum(1) / 5, rtol=1e-5)
    k = ta.reduce_axis((0, 3), name="k")
    with pytest.raises(TypeError, match="rhs must be a tensor, a Python number or a scalar in sizes"):
        ta.topi.multiply(X, k * 1.0)
    with pytest.raises(TypeError, match="rhs must be a tensor, a Python number or a scalar in sizes"):
        ta.topi.multiply(X, X[0, 0])
