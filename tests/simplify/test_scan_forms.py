"""Running reductions as users spell them, each linear forwards and backwards: a summed-area table
(a prefix over two axes), a cumulative max or min padded with its identity by a guard, a cumulative
product with zeros, a suffix sum, a prefix over a strided read, a prefix along a middle axis, an
exclusive prefix.

Work is counted on a pinned target against the hand counts written beside each form (a forward scan:
one combine per element; a sum's gradient: one scan of the head; a max's or min's: the winner's scan,
the scan of the head's shares and the routing; a product's: three scans).  Values and gradients are
checked in float64 against PyTorch's autograd of the formula written here."""

import itertools
import math

import numpy as np
import pytest
import torch

import tensorad as ta

AVX512 = "llvm -mcpu=skylake-avx512"
RNG = np.random.default_rng(45)
INF = float("inf")


def _check(Y, X, formula, xs, hand_forward, hand_gradient):
    """``Y``'s forward and gradient work within the hand counts, and both equal PyTorch's ``formula`` (of
    a float64 tensor) and its autograd for a random head at ``xs`` (an array, or a list of them: data the
    same kernel runs)."""
    H = ta.placeholder(Y.shape, "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([Y], [X], target=AVX512).work <= hand_forward
    low = ta.lower([dX], [X, H], target=AVX512)
    assert low.work <= hand_gradient, str(low)
    kernel = ta.build([Y, dX], [X, H])
    for x in xs if isinstance(xs, list) else [xs]:
        h = RNG.standard_normal(Y.shape)
        xt = torch.tensor(x, requires_grad=True)
        yt = formula(xt)
        yt.backward(torch.from_numpy(h))
        y, g = kernel(x, h)
        np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g, xt.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("columns", ["prefix", "suffix"])
def test_a_summed_area_table_is_two_scans_forwards_and_backwards(columns):
    """``Y[n, i, j] = sum_{a <= i, b <= j} X[n, a, b]`` (or ``b >= j``): one scan of the whole sum left
    the other axis a full prefix per point (n^3 / 2 updates); nested, it is a scan along each axis, and
    its adjoint two suffix scans: 2 updates per element each way."""
    n, m = 3, 24
    X = ta.placeholder((n, m, m), "float64", "X")
    a, b = ta.reduce_axis((0, m), "a"), ta.reduce_axis((0, m), "b")
    Y = ta.compute((n, m, m), lambda t, i, j: ta.sum(
        X[t, a, b], [a, b], where=(a <= i) & ((b <= j) if columns == "prefix" else (b >= j))), "sat")

    def formula(x):
        rows = x.cumsum(1)
        return rows.cumsum(2) if columns == "prefix" else rows.flip(2).cumsum(2).flip(2)

    _check(Y, X, formula, RNG.standard_normal((n, m, m)), 2 * n * m * m, 2 * n * m * m)


def test_a_summed_area_table_spelled_with_a_guard_is_the_same_two_scans():
    m = 24
    X = ta.placeholder((m, m), "float64", "X")
    a, b = ta.reduce_axis((0, m), "a"), ta.reduce_axis((0, m), "b")
    Y = ta.compute((m, m), lambda i, j: ta.sum(ta.if_then_else((a <= i) & (b <= j), X[a, b], 0.0), [a, b]),
                   "sat")
    _check(Y, X, lambda x: x.cumsum(0).cumsum(1), RNG.standard_normal((m, m)), 2 * m * m, 2 * m * m)


def _padded(kind, spelled, x):
    """PyTorch's ``amax``/``amin`` over each output's row of ``x`` padded with the identity where the
    guard ``spelled`` (``"prefix"``, ``"exclusive"``, ``"suffix"``) fails: ties with the padding share
    the head."""
    n = x.shape[0]
    i, k = torch.arange(n)[:, None], torch.arange(n)[None, :]
    inside = {"prefix": k <= i, "exclusive": k < i, "suffix": k >= i}[spelled]
    pad = torch.tensor(-INF if kind == "max" else INF, dtype=x.dtype)
    rows = torch.where(inside, x[None, :], pad)
    return rows.amax(1) if kind == "max" else rows.amin(1)


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("spelled", ["prefix", "exclusive", "suffix"])
def test_a_running_max_padded_by_a_guard_has_the_running_winners_linear_gradient(kind, spelled):
    """``max_k if_then_else(k <= i, X[k], -inf)``: the padding ties the maximum only where it is -inf
    (every element of the prefix is -inf), where PyTorch's ``amax`` of the padded row shares the head
    with the padded points too.  The gradient once took a winner pass and a routing sum over the whole
    square (33,024 work at n = 256); it is the ``where`` form's three scans, the padded points counted
    among the ties where the result is the identity."""
    n = 40
    pad = -INF if kind == "max" else INF
    X = ta.placeholder((n,), "float64", "X")
    k = ta.reduce_axis((0, n), "k")
    inside = {"prefix": lambda i: k <= i, "exclusive": lambda i: k < i, "suffix": lambda i: k >= i}[spelled]
    reduce = ta.max if kind == "max" else ta.min
    Y = ta.compute((n,), lambda i: reduce(ta.if_then_else(inside(i), X[k], pad), k), "running")
    data = {"distinct": RNG.permutation(n).astype(np.float64),
            "ties": RNG.integers(-2, 3, n).astype(np.float64),
            "all padding": np.full(n, pad),
            "some padding": np.where(RNG.random(n) < 0.5, pad, RNG.integers(-1, 2, n)).astype(np.float64)}
    _check(Y, X, lambda t: _padded(kind, spelled, t), list(data.values()), n, 3 * n)


def test_a_padded_running_max_without_ties_has_cummax_gradient():
    n = 32
    X = ta.placeholder((n,), "float64", "X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((n,), lambda i: ta.max(ta.if_then_else(k <= i, X[k], -INF), k), "cummax")
    _check(Y, X, lambda t: torch.cummax(t, 0).values, RNG.permutation(n).astype(np.float64), n, 3 * n)


def test_a_cumulative_product_with_zeros_is_three_scans_backwards():
    n = 40
    X = ta.placeholder((n,), "float64", "X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((n,), lambda i: ta.prod(ta.if_then_else(k <= i, X[k], 1.0), k), "cumprod")
    x = RNG.standard_normal(n)
    x[[3, 17, 18]] = 0.0
    _check(Y, X, lambda t: torch.cumprod(t, 0), x, n, 3 * n)


def test_a_suffix_sum_is_one_scan_each_way():
    n = 40
    X = ta.placeholder((n,), "float64", "X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((n,), lambda i: ta.sum(X[k], k, where=k >= i), "suffix")
    _check(Y, X, lambda t: t.flip(0).cumsum(0).flip(0), RNG.standard_normal(n), n, n)


def test_the_adjoint_of_a_prefix_over_a_strided_read_scans_its_even_points():
    """``Y[i] = sum_{k <= i} X[2 k]``: the adjoint ``dX[m] = sum_{i >= m / 2} H[i]`` at even ``m`` only,
    once a sum over the triangle; a scan carries it from ``m + 2``."""
    n = 40
    X = ta.placeholder((2 * n,), "float64", "X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((n,), lambda i: ta.sum(X[2 * k], k, where=k <= i), "strided")
    _check(Y, X, lambda t: t[::2].cumsum(0), RNG.standard_normal(2 * n), n, n)


def test_a_prefix_along_a_middle_axis_is_one_scan_each_way():
    b, n, c = 3, 40, 5
    X = ta.placeholder((b, n, c), "float64", "X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((b, n, c), lambda p, i, q: ta.sum(X[p, k, q], k, where=k <= i), "middle")
    _check(Y, X, lambda t: t.cumsum(1), RNG.standard_normal((b, n, c)), b * n * c, b * n * c)


@pytest.mark.parametrize("kind", ["sum", "max"])
def test_an_exclusive_prefix_is_one_scan_forwards(kind):
    n = 40
    X = ta.placeholder((n,), "float64", "X")
    k = ta.reduce_axis((0, n), "k")
    reduce = ta.sum if kind == "sum" else ta.max
    Y = ta.compute((n,), lambda i: reduce(X[k], k, where=k < i), "exclusive")

    def formula(t):
        if kind == "sum":
            return t.cumsum(0) - t
        shifted = torch.cat([torch.full((1,), -INF, dtype=t.dtype), t[:-1]])
        return torch.cummax(shifted, 0).values

    _check(Y, X, formula, RNG.permutation(n).astype(np.float64), n, (1 if kind == "sum" else 3) * n)


# ---- every prefix reduction's gradient is linear in the scanned length ----------------------------
# Layouts: the scanned axis alone, last behind a batch axis, between a batch axis and a channel axis.
LAYOUTS = {"1d": ((), ()), "last": ((3,), ()), "middle": ((3,), (4,))}
ARGMAX = ta.comm_reducer(
    lambda x, y: (ta.select(x[0] >= y[0], x[0], y[0]), ta.select(x[0] >= y[0], x[1], y[1])),
    lambda v, i: (ta.min_value(v), ta.const(-1, i)), name="argmax")
# Gradient passes per element, by hand: a sum's suffix scan of the head; a max's or min's winner scan
# (value and tie count), the suffix scan of the head's shares, the routing; a product's exclusive
# running product, the recurrence of the head and the routing; the log of a running sum of
# exponentials, that sum's scan, the suffix scan of the head over it, the product with each
# exponential; a running argmax's winner scan (value and index) and its scatter of the head.
PASSES = {"sum": 1, "max": 3, "min": 3, "prod": 3, "logsumexp": 3, "argmax": 2}


def _prefix_form(kind, layout, n, dtype="float32"):
    """``Y[b.., i, c..] = kind_{k <= i} X[b.., k, c..]`` in ``layout``, its input and its scanned axis."""
    before, after = LAYOUTS[layout]
    shape = (*before, n, *after)
    X = ta.placeholder(shape, dtype, "X")
    k = ta.reduce_axis((0, n), "k")
    p = len(before)

    def at(ix):
        return X[(*ix[:p], k, *ix[p + 1:])]

    if kind == "argmax":
        pair = ta.compute(shape, lambda *ix: ARGMAX((at(ix), k), axis=k, where=k <= ix[p]), "running")
        return X, pair[0], p
    if kind == "logsumexp":
        S = ta.compute(shape, lambda *ix: ta.sum(ta.exp(at(ix)), k, where=k <= ix[p]), "S")
        return X, ta.compute(shape, lambda *ix: ta.log(S[ix]), "running"), p
    reduce = {"sum": ta.sum, "max": ta.max, "min": ta.min, "prod": ta.prod}[kind]
    return X, ta.compute(shape, lambda *ix: reduce(at(ix), k, where=k <= ix[p]), "running"), p


def _gradient_work(kind, layout, n):
    X, Y, _ = _prefix_form(kind, layout, n)
    H = ta.placeholder(Y.shape, Y.dtype, "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    return ta.lower([Y], [X], target=AVX512).work, ta.lower([dX], [X, H], target=AVX512).work


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("kind", list(PASSES))
def test_a_prefix_reductions_gradient_doubles_with_its_length(kind, layout):
    """The adjoint of a prefix reduction is a suffix reduction: forward and gradient work at ``2 n`` are
    twice those at ``n`` (a product's routing skips each row's last point), within the hand counts."""
    n = 24
    (f1, g1), (f2, g2) = _gradient_work(kind, layout, n), _gradient_work(kind, layout, 2 * n)
    rows = math.prod(d for side in LAYOUTS[layout] for d in side)
    assert f2 == 2 * f1 and f1 <= (2 if kind == "logsumexp" else 1) * rows * n
    assert 2 * g1 <= g2 <= 2 * g1 + rows, (g1, g2)
    assert g1 <= PASSES[kind] * rows * n


def _even_split(x, h, better, axis):
    """NumPy's rule of a max or min over each prefix along ``axis``: each output's head split evenly
    among the points of its prefix that tie its result (PyTorch's ``amax`` of each window)."""
    x, h = np.moveaxis(x, axis, -1), np.moveaxis(h, axis, -1)
    g = np.zeros_like(x)
    for row in np.ndindex(x.shape[:-1]):
        for i in range(x.shape[-1]):
            prefix = x[row][: i + 1]
            tied = prefix == (prefix.max() if better is np.greater else prefix.min())
            g[row][: i + 1] += np.where(tied, h[row][i] / tied.sum(), 0.0)
    return np.moveaxis(g, -1, axis)


def _first_winner(x, h, axis):
    """NumPy's rule of a running argmax: the head goes to the first maximum of each prefix."""
    x, h = np.moveaxis(x, axis, -1), np.moveaxis(h, axis, -1)
    g = np.zeros_like(x)
    for row in np.ndindex(x.shape[:-1]):
        for i in range(x.shape[-1]):
            g[row][int(np.argmax(x[row][: i + 1]))] += h[row][i]
    return np.moveaxis(g, -1, axis)


@pytest.mark.parametrize("layout", ["1d", "middle"])
@pytest.mark.parametrize("kind", list(PASSES))
def test_a_prefix_reductions_gradient_equals_its_formula_with_ties_and_zeros(kind, layout):
    """Values in float64: a max or min with many ties splits each head evenly among the tied points of
    its prefix (the rule of ``torch.amax`` over each window; ``torch.cummax`` gives the head to the last
    tied point instead), checked against that rule written in NumPy; a running argmax gives it to the
    first maximum; a product with zeros, a sum and a log-sum-exp equal PyTorch's ``cumprod``, ``cumsum``
    and ``logcumsumexp``."""
    n = 11
    X, Y, axis = _prefix_form(kind, layout, n, "float64")
    H = ta.placeholder(Y.shape, "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    x = RNG.integers(-2, 3, X.shape).astype(np.float64) if kind in ("max", "min", "argmax") \
        else RNG.standard_normal(X.shape)
    if kind == "prod":
        x[..., :3][x[..., :3] > 0.5] = 0.0
        x.flat[5] = x.flat[6] = 0.0
    h = RNG.standard_normal(Y.shape)
    y, g = ta.build([Y, dX], [X, H])(x, h)
    if kind in ("max", "min"):
        better = np.greater if kind == "max" else np.less
        accumulate = np.maximum if kind == "max" else np.minimum
        np.testing.assert_array_equal(y, accumulate.accumulate(x, axis=axis))
        np.testing.assert_allclose(g, _even_split(x, h, better, axis), rtol=1e-12, atol=1e-12)
        return
    if kind == "argmax":
        np.testing.assert_array_equal(y, np.maximum.accumulate(x, axis=axis))
        np.testing.assert_allclose(g, _first_winner(x, h, axis), rtol=1e-12, atol=1e-12)
        return
    xt = torch.tensor(x, requires_grad=True)
    yt = {"sum": torch.cumsum, "prod": torch.cumprod, "logsumexp": torch.logcumsumexp}[kind](xt, axis)
    yt.backward(torch.from_numpy(h))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g, xt.grad.numpy(), rtol=1e-11, atol=1e-12)


# ---- a prefix over several axes: nested running reductions backwards too --------------------------
# Gradient passes per element, by hand: a max's or min's inner and outer winner scans (each with its
# tie count), the whole window's ties, the head's shares, the outer's suffix recurrence and routing,
# the inner's suffix recurrence and routing (8).
BOX_PASSES = {"max": 8, "min": 8}
SIDES = {"le": lambda r, i: r <= i, "lt": lambda r, i: r < i, "ge": lambda r, i: r >= i}


def _box_form(kind, shape, scanned, sides, dtype="float64"):
    """``Y[..] = kind`` over the box of ``scanned`` axes, each bounded by its output index as ``sides``."""
    X = ta.placeholder(shape, dtype, "X")
    rs = [ta.reduce_axis((0, shape[a]), f"r{a}") for a in scanned]
    reduce = ta.max if kind == "max" else ta.min

    def body(*ix):
        read, cond = list(ix), None
        for a, r, side in zip(scanned, rs, sides):
            read[a] = r
            cond = SIDES[side](r, ix[a]) if cond is None else cond & SIDES[side](r, ix[a])
        return reduce(X[tuple(read)], rs, where=cond)

    Y = ta.compute(shape, body, "box")
    H = ta.placeholder(shape, dtype, "H")
    return X, Y, H, ta.JacobianRecursive(Y, [X], H)[0]


@pytest.mark.parametrize("kind", list(BOX_PASSES))
def test_a_prefix_over_two_axes_has_a_gradient_linear_in_its_area(kind):
    """``Y[i, j] = max_{a <= i, b <= j} X[a, b]`` nests into a running max of running maxes; so does its
    adjoint, suffix scans of suffix scans, where a winner over each output's window and a routing of its
    ties over the window took ``n^4 / 4``."""
    works = []
    for m in (12, 24):
        X, _, H, dX = _box_form(kind, (12, m), (0, 1), ("le", "le"), "float32")
        works.append(ta.lower([dX], [X, H], target=AVX512).work)
    assert works[1] == 2 * works[0] and works[0] <= BOX_PASSES[kind] * 12 * 12, works


def _window_oracle(kind, x, h, scanned, sides):
    """PyTorch's ``max``/``min`` of each output's window and its autograd: the head split evenly among
    the window's ties, its NaNs tying."""
    xt = torch.tensor(x, requires_grad=True)
    total, y = torch.zeros((), dtype=torch.float64), np.zeros(x.shape)
    for ix in np.ndindex(x.shape):
        ranges = [[k for k in range(x.shape[a]) if {"le": k <= ix[a], "lt": k < ix[a], "ge": k >= ix[a]}[s]]
                  for a, s in zip(scanned, sides)]
        points = []
        for combo in itertools.product(*ranges):
            p = list(ix)
            for a, k in zip(scanned, combo):
                p[a] = k
            points.append(xt[tuple(p)])
        if not points:
            y[ix] = -INF if kind == "max" else INF
            continue
        v = torch.stack(points)
        out = (torch.max if kind == "max" else torch.min)(v)
        y[ix] = out.item()
        total = total + float(h[ix]) * out
    total.backward()
    return y, xt.grad.numpy()


@pytest.mark.parametrize("kind,shape,scanned,sides", [
    ("max", (5, 6), (0, 1), ("le", "le")), ("min", (5, 6), (0, 1), ("le", "ge")),
    ("max", (3, 5, 4), (1, 2), ("le", "le")), ("max", (5, 2, 4), (0, 2), ("ge", "le")),
    ("min", (5, 6), (0, 1), ("lt", "le")), ("max", (3, 4, 5), (0, 1, 2), ("le", "le", "le"))])
def test_a_prefix_over_several_axes_has_pytorchs_gradient(kind, shape, scanned, sides):
    """Ties split the head over the whole window, not per nested row; NaN and infinities as PyTorch (one
    kernel runs data with ties, distinct values, NaNs and infinities)."""
    X, Y, H, dX = _box_form(kind, shape, scanned, sides)
    kernel = ta.build([Y, dX], [X, H])
    for data in ("ties", "distinct", "nan", "inf"):
        x = RNG.integers(-2, 3, shape).astype(np.float64)
        if data == "nan":
            x.flat[RNG.integers(0, x.size, 3)] = np.nan
        elif data == "inf":
            x.flat[RNG.integers(0, x.size, 4)] = [INF, -INF, INF, -INF]
        elif data == "distinct":
            x = RNG.permutation(x.size).reshape(shape) / 4.0
        h = RNG.standard_normal(shape)
        want_y, want_g = _window_oracle(kind, x, h, scanned, sides)
        y, g = kernel(x, h)
        np.testing.assert_allclose(y, want_y, rtol=1e-12, atol=0, err_msg=data)
        np.testing.assert_allclose(g, want_g, rtol=1e-12, atol=1e-12, err_msg=data)


# ---- a running reduction whose window axis has another range than its output axis ---------------
# (window range, output length, where): an exclusive prefix shorter than the outputs, starting below 0;
# suffixes longer than the outputs, one whose windows all start past the range's start; a prefix whose
# windows all end before the range's end
RANGED = {"short prefix": ((-3, 17), 40, lambda r, j: r < j),
          "suffix": ((0, 30), 12, lambda r, j: r >= j - 3),
          "late suffix": ((0, 30), 12, lambda r, j: r >= j + 5),
          "long prefix": ((2, 50), 9, lambda r, j: r <= j + 4)}


@pytest.mark.parametrize("kind", ["max", "min", "prod"])
@pytest.mark.parametrize("window", list(RANGED))
def test_a_running_reduction_over_another_range_than_its_output_is_linear(kind, window):
    """``Y[b, j] = max_{k in [lo, hi), k < j} X[b, k - lo]`` with ``j`` over its own range: ``Y[j]`` is a
    plain prefix over the points some window holds, read at ``clamp(j - 1)`` (the identity where the
    window is empty), so its gradient is that prefix's scans, plus one sum of the heads of the outputs
    past its last point; a winner pass and a routing sum per output and window point took ``n_j n_k``.  Ties
    split each head among the window's tied points (``amax`` of each window); a product with zeros
    matches PyTorch's."""
    (lo, hi), n, where = RANGED[window]
    b, nk = 3, hi - lo
    X = ta.placeholder((b, nk), "float64", "X")
    k = ta.reduce_axis((lo, hi), "k")
    reduce = {"max": ta.max, "min": ta.min, "prod": ta.prod}[kind]
    Y = ta.compute((b, n), lambda p, j: reduce(X[p, k - lo], k, where=where(k, j)), "ranged")
    xs = [RNG.standard_normal((b, nk)), RNG.integers(-2, 3, (b, nk)).astype(np.float64)]  # distinct; ties
    j, ks = torch.arange(n)[:, None], torch.arange(lo, hi)[None, :]
    inside = where(ks, j)
    pad = {"max": -INF, "min": INF, "prod": 1.0}[kind]

    def formula(t):
        rows = torch.where(inside, t[:, None, :], torch.tensor(pad, dtype=t.dtype))
        return rows.amax(2) if kind == "max" else rows.amin(2) if kind == "min" else rows.prod(2)

    # over the m points some window holds: a winner scan, the scan of the head's shares and the routing
    # (a product: its exclusive running product, the head's recurrence, the adjoint and its copy into the
    # points of the gradient it covers), and the heads of the outputs past the last point
    m = int(inside.any(0).sum())
    _check(Y, X, formula, xs, b * m, b * ((4 if kind == "prod" else 3) * m + n))
