"""ta.lower: printed loop programs, exact work counts, inlining choices, input checks."""

import numpy as np
import pytest

import tensorad as ta


def _mat(n, m, name, dtype="float32"):
    return ta.placeholder((n, m), dtype, name)


def test_dense_box_work_is_product_of_extents():
    X, W = _mat(32, 10000, "X"), _mat(3000, 10000, "W")
    k = ta.reduce_axis((0, 10000), "k")
    Y = ta.compute((32, 3000), lambda i, j: ta.sum(X[i, k] * W[j, k], k), name="Y")
    f = ta.lower([Y], [X, W])
    assert f.work == 32 * 3000 * 10000
    assert "for k in range(0, 10000)" in str(f)


@pytest.mark.parametrize("n", [1, 7, 100])
def test_triangular_reduction_work(n):
    A = _mat(n, n, "A")
    k = ta.reduce_axis((0, n), "k")
    T = ta.compute((n,), lambda i: ta.sum(A[i, k], k, where=k <= i), name="T")
    f = ta.lower([T], [A])
    assert f.work == n * (n + 1) // 2
    if n > 1:
        assert "range(0, (i + 1))" in str(f)


def test_select_zero_domain_is_iterated_exactly():
    n = 50
    A = _mat(n, n, "A")
    S = ta.compute((n, n), lambda i, j: ta.select(j < i, A[i, j], 0.0), name="S")
    f = ta.lower([S], [A])
    assert f.work == n * (n - 1) // 2
    assert "memset 0 -> S" in str(f)


def test_select_zero_on_the_left_and_if_then_else():
    n = 20
    A = _mat(n, n, "A")
    S = ta.compute((n, n), lambda i, j: ta.if_then_else(j >= i, 0.0, A[i, j]), name="S")
    assert ta.lower([S], [A]).work == n * (n - 1) // 2


def test_non_affine_rest_of_condition_stays_in_body():
    A = _mat(6, 9, "A", "float64")
    k = ta.reduce_axis((0, 9), "k")
    W = ta.compute((6,), lambda i: ta.sum(A[i, k], k, where=(A[i, k] > 0) & (k >= i)), name="W")
    f = ta.lower([W], [A])
    text = str(f)
    assert "if (A[i, k] > 0.0):" in text and "range(i, 9)" in text
    assert f.work == sum(9 - i for i in range(6))


def test_condition_on_outer_axes_only_fills_identity():
    A = _mat(10, 10, "A")
    k = ta.reduce_axis((0, 10), "k")
    M = ta.compute((10, 10), lambda i, j: ta.max(A[k, j], k, where=i == j), name="M")
    f = ta.lower([M], [A])
    assert f.work == 10 * 10
    assert "fill" in str(f)


def test_strided_domain_counts_only_its_points():
    A = ta.placeholder((40,), "float32", "A")
    S = ta.compute((40,), lambda i: ta.select(i % 3 == 1, A[i], 0.0), name="S")
    f = ta.lower([S], [A])
    assert f.work == len(range(1, 40, 3))


def test_flatten_gradient_like_reduction_with_div_mod_condition():
    # sum over k of H[b, k] where the flattened index k maps back to (c, h, w)
    H = ta.placeholder((2, 60), "float32", "H")
    k = ta.reduce_axis((0, 60), "k")
    G = ta.compute((2, 3, 4, 5), lambda b, c, h, w: ta.sum(
        H[b, k], k, where=(c == k // 20) & (h == (k // 5) % 4) & (w == k % 5)), name="G")
    f = ta.lower([G], [H])
    assert f.work == 2 * 60  # one k per output element


def test_elementwise_producer_is_inlined_and_reduction_materialized():
    A, B = _mat(8, 8, "A"), _mat(8, 8, "B")
    E = ta.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="E")
    k = ta.reduce_axis((0, 8), "k")
    C = ta.compute((8, 8), lambda i, j: ta.sum(E[i, k] * B[k, j], k), name="C")
    D = ta.compute((8, 8), lambda i, j: C[i, j] + 1.0, name="D")
    text = str(ta.lower([D], [A, B]))
    assert "# inlined: E" in text
    assert "allocate E" not in text
    # D is C's only reader, elementwise at the same index: fused into C's store
    assert "epilogue D fused" in text and "allocate C" not in text
    assert "allocate C" in str(ta.lower([D], [A, B], fuse=False))


def test_expensive_producer_read_twice_is_materialized():
    X = _mat(4, 100, "X")
    E = ta.compute((4, 100), lambda i, j: ta.exp(X[i, j]), name="E")
    k = ta.reduce_axis((0, 100), "k")
    S = ta.compute((4,), lambda i: ta.sum(E[i, k], k), name="S")
    Y = ta.compute((4, 100), lambda i, j: E[i, j] / S[i], name="Y")
    text = str(ta.lower([Y], [X]))
    assert "allocate E" in text


def test_a_mean_scaled_by_a_value_of_no_axis_is_inlined(rng):
    """A mean divided by a count read from an input (a staged batch norm's ``sum / n``) costs what its
    product by a reciprocal computed once costs, as a division by a constant does: read twice per
    element, it is inlined, not stored once more per channel."""
    X, N = _mat(4, 100, "X"), ta.placeholder((1,), "float32", "N")
    k = ta.reduce_axis((0, 100), "k")
    S = ta.compute((4,), lambda i: ta.sum(X[i, k], k), name="S")
    M = ta.compute((4,), lambda i: S[i] / N[0], name="M")
    Y = ta.compute((4, 100), lambda i, j: (X[i, j] - M[i]) * (X[i, j] - M[i]), name="Y")
    text = str(ta.lower([Y], [X, N]))
    assert "allocate M:" not in text and "inlined: M" in text
    x, n = rng.standard_normal((4, 100)).astype(np.float32), np.array([7.0], np.float32)
    want = (x - x.astype(np.float64).sum(1, keepdims=True) / 7.0) ** 2
    np.testing.assert_allclose(ta.build([Y], [X, N])(x, n), want, rtol=1e-5, atol=1e-5)

def test_a_producer_gathering_many_reads_read_twice_is_materialized(rng):
    """A value whose own body is two reads but whose inlined producers gather many (a chain of cheap
    products, as a recurrence's state rebuilt from saved gates) was inlined into a reader that reads
    it several times per element, so the whole chain ran once per read: it gets a buffer."""
    n, depth = 16, 10
    P = [ta.placeholder((n,), "float32", f"P{k}") for k in range(depth)]
    W = ta.placeholder((4,), "float32", "W")
    s = P[0]
    for k, p in enumerate(P[1:]):
        s = ta.compute((n,), lambda i, s=s, p=p: s[i] * p[i] + p[i], name=f"s{k}")
    Y = ta.compute((n, 4), lambda i, j: s[i] * W[j], name="Y")
    text = str(ta.lower([Y], P + [W]))
    assert f"allocate {s.name}" in text
    store = next(line for line in text.splitlines() if line.strip().startswith("Y["))
    assert "P0[" not in store
    args = [rng.standard_normal((n,)).astype(np.float32) for _ in P] + \
        [rng.standard_normal((4,)).astype(np.float32)]
    want = args[0].astype(np.float64)
    for a in args[1:-1]:
        want = want * a + a
    for threads in (1, 2):
        got = ta.build([Y], P + [W], num_threads=threads, checked=True)(*args)
        np.testing.assert_allclose(got, np.outer(want, args[-1]), rtol=1e-5, atol=1e-5)


def test_jacobian_sized_select_is_never_materialized():
    X = _mat(4, 30, "X")
    J = ta.compute((4, 30, 4, 30), lambda a, b, c, d: ta.select((a == c) & (b == d), ta.exp(X[a, b]), 0.0),
                   name="J")
    k1, k2 = ta.reduce_axis((0, 4), "k1"), ta.reduce_axis((0, 30), "k2")
    G = ta.compute((4, 30), lambda c, d: ta.sum(J[k1, k2, c, d], [k1, k2]), name="G")
    text = str(ta.lower([G], [X]))
    assert "allocate J" not in text


def test_zero_d_and_size_one_axes():
    A = ta.placeholder((1, 5), "float32", "A")
    k = ta.reduce_axis((0, 5), "k")
    z = ta.compute((), lambda: ta.sum(A[0, k], k), name="z")
    f = ta.lower([z], [A])
    assert f.work == 5
    e = ta.compute((1, 1), lambda i, j: A[i, j], name="e")
    assert ta.lower([e], [A]).work == 1


def test_empty_axis_has_no_work():
    A = ta.placeholder((0, 5), "float32", "A")
    B = ta.compute((0, 5), lambda i, j: A[i, j] + 1.0, name="B")
    assert ta.lower([B], [A]).work == 0


def test_missing_input_is_named():
    A, B = _mat(3, 3, "A"), _mat(3, 3, "Bmissing")
    C = ta.compute((3, 3), lambda i, j: A[i, j] + B[i, j], name="C")
    with pytest.raises(ValueError, match="Bmissing"):
        ta.lower([C], [A])


def test_bad_output_and_input_lists():
    A = _mat(3, 3, "A")
    C = ta.compute((3, 3), lambda i, j: A[i, j], name="C")
    with pytest.raises(TypeError, match="outputs"):
        ta.lower([C, 3], [A])
    with pytest.raises(ValueError, match="twice"):
        ta.lower([C], [A, A])
    with pytest.raises(TypeError, match="unknown option"):
        ta.lower([C], [A], bogus=1)


def test_intermediate_given_as_input_is_a_buffer():
    A = _mat(3, 3, "A")
    B = ta.compute((3, 3), lambda i, j: A[i, j] * 2.0, name="B")
    C = ta.compute((3, 3), lambda i, j: B[i, j] + 1.0, name="C")
    text = str(ta.lower([C], [B]))
    assert "(B[" in text and "A[" not in text  # B is read, not recomputed from A


def test_printing_is_deterministic():
    def make():
        A = _mat(5, 5, "A")
        k = ta.reduce_axis((0, 5), "k")
        return str(ta.lower([ta.compute((5,), lambda i: ta.sum(A[i, k], k, where=k < i), name="R")], [A]))
    assert make() == make()


def test_parallel_loop_only_with_enough_work():
    A = _mat(40, 40, "A")
    B = ta.compute((40, 40), lambda i, j: A[i, j] * 2.0, name="B")
    assert "parallel for" not in str(ta.lower([B], [A]))
    # (the short rows may be scanned with i as one loop: ``parallel for i.j``)
    assert "parallel for i" in str(ta.lower([B], [A], parallel_min_work=0))
    assert "parallel for" not in str(ta.lower([B], [A], parallel=False, parallel_min_work=0))
    big = _mat(300, 300, "big")
    C = ta.compute((300, 300), lambda i, j: big[i, j] * 2.0, name="C")
    assert "parallel for" in str(ta.lower([C], [big]))


def test_fused_zero_select_consumer_restricts_the_reduction():
    n = 30
    A = _mat(n, n, "A", "float64")
    k = ta.reduce_axis((0, n), "k")
    R = ta.compute((n, n), lambda i, j: ta.max(A[i, k] + A[k, j], k), name="R")
    C = ta.compute((n, n), lambda i, j: ta.select(j <= i, R[i, j] * 2.0, 0.0), name="C")
    f = ta.lower([C], [A])
    assert "epilogue C fused" in str(f) and "memset 0 -> C" in str(f)
    assert f.work == n * (n + 1) // 2 * n
    import numpy as np
    a = np.random.default_rng(3).standard_normal((n, n))
    want = np.tril((a[:, :, None] + a[None, :, :]).max(axis=1) * 2)
    np.testing.assert_allclose(ta.build([C], [A])(a), want)


def test_lowered_program_displays_as_html_in_jupyter():
    A = ta.placeholder((3, 4), name="A")
    k = ta.reduce_axis((0, 4), "k")
    S = ta.compute((3,), lambda i: ta.sum(A[i, k] * 2.0, axis=k), name="S")
    html = ta.lower([S], [A])._repr_html_()
    assert html.startswith("<pre") and "<b>  # nest S: work 12" in html
    assert "for k in range(0, 4)" in html and "work: 12" in html
