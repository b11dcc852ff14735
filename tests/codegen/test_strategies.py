"""The strategy registry (match, cost, lower), pinned choices, and ``tune=True``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tensorad.codegen import tune
from tensorad.codegen.strategies.catalog import REGISTRY
from tensorad.codegen.strategies.cost import SPILLED_PACK, pack_cycles
from tensorad.codegen.strategies.registry import PlanContext
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta


def _gemm(m: int = 64, n: int = 64, k: int = 64):
    X = ta.placeholder((m, k), name="X")
    W = ta.placeholder((n, k), name="W")
    r = ta.reduce_axis((0, k), "r")
    Y = ta.compute((m, n), lambda i, j: ta.sum(X[i, r] * W[j, r], axis=r), name="Y")
    return X, W, Y


def _column_sum(rows: int = 48, cols: int = 40):
    H = ta.placeholder((rows, cols), name="H")
    r = ta.reduce_axis((0, rows), "r")
    B = ta.compute((cols,), lambda j: ta.sum(H[r, j], axis=r), name="B")
    return H, B


def test_registry_entries_are_strategies_with_distinct_names():
    names = [s.name for s in REGISTRY]
    assert len(set(names)) == len(names)
    for s in REGISTRY:
        assert callable(s.match) and callable(s.cost) and callable(s.lower)
    assert {"loops", "strips", "microkernel", "padded", "split-k", "parity", "epilogue"} <= set(names)


def test_gemm_is_offered_loops_and_the_micro_kernel_and_takes_the_cheaper():
    X, W, Y = _gemm()
    lowered = ta.lower([Y], [X, W])
    (point, labels, chosen), = lowered.offered
    assert {"loops", "microkernel"} <= set(labels)
    assert chosen == "microkernel"
    assert "matrix product" in str(lowered)


def test_microkernel_true_forces_the_first_of_its_strategies_offered_unless_a_choice_pins_one():
    """``microkernel=True`` takes, whatever it costs, the first strategy of
    ``MICROKERNEL_FIRST`` that an op is offered: a padded convolution's zero-padded copies
    before the plain micro-kernel (registered first), a strided convolution's input gradient
    as one product per residue class instead of its cheaper loops; a pinned choice wins."""
    haswell = "llvm -mcpu=haswell"
    X = ta.placeholder((2, 8, 16, 16), "float32", "X")
    W = ta.placeholder((8, 8, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 1)
    (point, labels, chosen), = ta.lower([Y], [X, W], microkernel=True, target=haswell).offered
    assert labels.index("microkernel") < labels.index("padded") and chosen == "padded"
    pinned = ta.lower([Y], [X, W], microkernel=True, target=haswell, choices={point: "microkernel"})
    assert pinned.offered[0][2] == "microkernel"
    H = ta.placeholder((2, 8, 8, 8), "float32", "H")
    (gx,) = ta.JacobianRecursive(ta.topi.nn.conv2d(X, W, 2, 1), [X], H)
    top = {mk: dict((p, c) for p, _, c in ta.lower([gx], [W, H], microkernel=mk, target=haswell).offered)
           for mk in (None, True)}
    assert top[None]["X.grad#0"] != "parity" and top[True]["X.grad#0"] == "parity"
    assert {c for p, c in top[True].items() if p.startswith("X.grad#0/")} == {"microkernel"}


def test_variants_offer_other_register_tiles():
    X, W, Y = _gemm()
    (_, labels, _), = ta.lower([Y], [X, W], variants=True).offered
    tiles = [lab for lab in labels if lab.startswith("microkernel:")]
    assert tiles, labels


@pytest.mark.parametrize("label", ["loops", "microkernel"])
def test_a_pinned_choice_is_used_and_computes_the_same(label):
    X, W, Y = _gemm()
    point = ta.lower([Y], [X, W]).offered[0][0]
    lowered = ta.lower([Y], [X, W], choices={point: label})
    assert lowered.offered[0][2] == label
    assert ("matrix product" in str(lowered)) == (label == "microkernel")
    assert lowered.work == 64 ** 3
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((64, 64), "float32"), rng.standard_normal((64, 64), "float32")
    got = ta.build([Y], [X, W], choices={point: label})(x, w)
    np.testing.assert_allclose(got, x.astype("float64") @ w.T.astype("float64"), rtol=1e-4, atol=1e-4)


def test_column_sum_takes_strips_by_the_access_strides():
    H, B = _column_sum()
    (_, labels, chosen), = ta.lower([B], [H]).offered
    assert labels == ("loops", "strips") and chosen == "strips"  # rows are contiguous: j innermost
    Ht = ta.placeholder((40, 48), name="Ht")  # the transposed layout: the sum's axis is contiguous
    r = ta.reduce_axis((0, 48), "r")
    Bt = ta.compute((40,), lambda j: ta.sum(Ht[j, r], axis=r), name="Bt")
    assert ta.lower([Bt], [Ht]).offered[0][2] == "loops"


def test_an_unknown_label_is_ignored_and_bad_choices_are_refused():
    H, B = _column_sum()
    point = ta.lower([B], [H]).offered[0][0]
    assert ta.lower([B], [H], choices={point: "no-such-strategy"}).offered[0][2] == "strips"
    with pytest.raises(TypeError, match="choices"):
        ta.lower([B], [H], choices=5)
    with pytest.raises(TypeError, match="choices"):
        ta.lower([B], [H], choices={point: 3})
    with pytest.raises(TypeError, match="tune"):
        ta.build([B], [H], tune="yes")


def test_tune_measures_once_then_reuses_its_choice_from_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))
    H, B = _column_sum(1024, 512)  # (worth measuring: estimated above tune.MIN_CYCLES)
    h = np.random.default_rng(1).standard_normal((1024, 512)).astype("float32")
    plain = ta.build([B], [H])(h)
    tuned = ta.build([B], [H], tune=True)
    measured = tuned.measured
    assert measured == 2  # loops and strips
    np.testing.assert_allclose(tuned(h), plain, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tuned(h), h.astype("float64").sum(0), rtol=1e-4, atol=1e-4)
    again = ta.build([B], [H], tune=True)  # the choice comes from the disk cache
    assert again.measured == 0
    np.testing.assert_array_equal(again(h), tuned(h))
    assert ta.build([B], [H], tune=True, cache=False).measured == measured  # no cache: measured again
    other = "llvm -mcpu=x86-64"  # (SSE2: runs on any x86-64)
    if parse_target(other).runs_here(host_target()):
        assert ta.build([B], [H], tune=True, target=other).measured == measured  # its own entry


def test_tune_leaves_points_too_small_to_measure_to_the_cost_model(tmp_path, monkeypatch):
    """Every candidate costs a whole build: points the cost model puts below
    ``tune.MIN_CYCLES`` are not measured (twenty tiny ops took minutes), and
    the measured ones go heaviest first."""
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))
    H, B = _column_sum(56, 48)
    lowered = ta.lower([B], [H])
    (point, labels, chosen), = lowered.offered
    assert len(labels) == 2 and lowered.estimates[point] < tune.MIN_CYCLES
    tuned = ta.build([B], [H], tune=True)
    assert tuned.measured == 0
    assert str(tuned.lowered) == str(lowered)  # the cost model's choice
    (small_h, small), (mid_h, mid), (big_h, big) = (_column_sum(56, 48), _column_sum(1024, 512),
                                                    _column_sum(2048, 512))
    base = ta.lower([small, mid, big], [small_h, mid_h, big_h], variants=True)
    assert len(base.offered) == 3
    order = [point for point, _ in tune.worth_measuring(base)]
    assert [p.split("#")[0] for p in order] == ["B", "B"] and len(set(order)) == 2
    assert base.estimates[order[0]] > base.estimates[order[1]] >= tune.MIN_CYCLES


def test_a_pooling_window_over_whole_rows_is_one_collapsed_loop():
    X = ta.placeholder((3, 5, 14, 14), name="X")
    y = ta.reduce_axis((0, 14), "y")
    x = ta.reduce_axis((0, 14), "x")
    S = ta.compute((3, 5), lambda n, c: ta.sum(X[n, c, y, x], axis=[y, x]), name="S")
    lowered = ta.lower([S], [X])
    (_, labels, chosen), = lowered.offered
    assert chosen == "collapse" and "loops" in labels
    assert "range(0, 196)" in str(lowered)
    point = lowered.offered[0][0]
    assert lowered.work == ta.lower([S], [X], choices={point: "loops"}).work == 3 * 5 * 196
    data = np.random.default_rng(2).standard_normal((3, 5, 14, 14)).astype("float32")
    np.testing.assert_allclose(ta.build([S], [X])(data), data.astype("float64").sum((2, 3)),
                               rtol=1e-4, atol=1e-4)


def test_axes_read_elsewhere_or_out_of_step_are_not_collapsed():
    X = ta.placeholder((4, 14, 14), name="X")
    y = ta.reduce_axis((0, 14), "y")
    x = ta.reduce_axis((0, 14), "x")
    T = ta.compute((4,), lambda n: ta.sum(X[n, x, y], axis=[y, x]), name="T")  # transposed
    U = ta.compute((4,), lambda n: ta.sum(X[n, y, x] * ta.cast("float32", x), axis=[y, x]), name="U")
    for t in (T, U):
        assert all("collapse" not in labels for _, labels, _ in ta.lower([t], [X]).offered)


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=emeraldrapids"])
def test_a_matrix_product_is_not_offered_as_collapsed_loops(target):
    """A 1x1 convolution's weight gradient sums over ``n, y, x`` (the last two contiguous): a
    product, whose plain loops re-read both sides per output point.  On AVX-512 the collapsed
    loops were chosen over the micro-kernel and ran 2.7x slower (Emerald Rapids, 8 x 64 x 56 x
    56 against 256 filters)."""
    X = ta.placeholder((8, 64, 56, 56), name="X")
    W = ta.placeholder((256, 64, 1, 1), name="W")
    Y = ta.topi.nn.conv2d(X, W, 1, 0)
    H = ta.placeholder(Y.shape, name="H")
    (gw,) = ta.gradient(Y, [W], H)
    offered = ta.lower([gw], [X, H], target=target, num_threads=1).offered
    assert offered and all("collapse" not in labels for _, labels, _ in offered)
    assert offered[0][2] in ("microkernel", "split-k")


@pytest.mark.parametrize("shift, cols", [(0, 7), (3, 7), (0, 8)])
def test_reads_of_a_value_and_its_digits_address_the_value(shift, cols):
    """``X[(k + s) // 7, (k + s) % 7]`` is ``flat(X)[k + s]`` when rows are 7 long (the address
    recombines the digits); with rows of 8 it is not, and must stay correct."""
    X = ta.placeholder((9, cols), name="X")
    n = 49
    Y = ta.compute((n,), lambda k: X[(k + shift) // 7, (k + shift) % 7] * 2.0, name="Y")
    data = np.random.default_rng(3).standard_normal((9, cols)).astype("float32")
    k = np.arange(n) + shift
    np.testing.assert_array_equal(ta.build([Y], [X])(data), data[k // 7, k % 7] * 2)


def test_sibling_reductions_over_one_input_share_a_nest():
    H = ta.placeholder((4, 6, 9, 9), name="H")
    X = ta.placeholder((4, 6, 9, 9), name="X")

    def total(name, f):
        n = ta.reduce_axis((0, 4), "n")
        y = ta.reduce_axis((0, 9), "y")
        x = ta.reduce_axis((0, 9), "x")
        return ta.compute((6,), lambda c: ta.sum(f(n, c, y, x), axis=[n, y, x]), name=name)

    G = total("G", lambda n, c, y, x: H[n, c, y, x] * X[n, c, y, x])
    D = ta.compute(H.shape, lambda n, c, y, x: H[n, c, y, x] * G[c], name="D")  # between them
    B = total("B", lambda n, c, y, x: H[n, c, y, x])
    lowered = ta.lower([G, D, B], [H, X])
    nests = [line for line in str(lowered).splitlines() if line.lstrip().startswith("# nest")]
    assert any("G" in line and "+B" in line for line in nests), nests
    assert lowered.work == 2 * 4 * 6 * 81 + 4 * 6 * 81  # each member in loops of its own
    rng = np.random.default_rng(4)
    h, xv = (rng.standard_normal((4, 6, 9, 9)).astype("float32") for _ in range(2))
    g, d, b = ta.build([G, D, B], [H, X])(h, xv)
    want_g = (h.astype("float64") * xv).sum((0, 2, 3))
    np.testing.assert_allclose(g, want_g, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(b, h.astype("float64").sum((0, 2, 3)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(d, h * g[None, :, None, None], rtol=1e-5, atol=1e-5)


def test_each_candidate_is_costed_once(monkeypatch):
    # (a long chain's lowering costed the chosen candidate of each op twice: its loops counted
    # once to pick it and again to record its cost)
    costed: dict[int, int] = {}
    alive = []  # (the candidates kept, so that no id is reused)
    for s in {type(s) for s in REGISTRY}:
        def counted(self, cand, ctx, _cost=s.cost):
            costed[id(cand)] = costed.get(id(cand), 0) + 1
            alive.append(cand)
            return _cost(self, cand, ctx)
        monkeypatch.setattr(s, "cost", counted)
    X, W, Y = _gemm()
    Z = ta.compute(Y.shape, lambda i, j: ta.tanh(Y[i, j]) * 0.5, name="Z")
    low = ta.lower([Z], [X, W])
    assert len(costed) >= 3 and set(costed.values()) == {1}
    x, w = np.random.default_rng(0).standard_normal((2, 64, 64)).astype("float32")
    np.testing.assert_allclose(ta.build([Z], [X, W], cache=False)(x, w), np.tanh(x @ w.T) * 0.5,
                               rtol=1e-4, atol=1e-5)
    assert low.offered  # (a choice was made between strategies)


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"])
def test_packing_past_the_l2_is_costed_by_its_memory_wait(target):
    # An RGB stem's input gradient (7x7 stride 2, batch 8) is one product per residue class,
    # [3 x 576..1024] @ [.. x 12544]: its windowed head (26 MB) would be packed for three rows
    # only, each element from the L3 or memory (measured on an AMD EPYC, 1 thread: 172 ms as
    # products, 89 as strips).  With sixteen input channels the packing is shared by sixteen
    # rows and the products stay.  The caches are that machine's (a target that runs here
    # takes the host's: on a 2 MiB L2 the largest class's padded product is a near tie).
    tgt = replace(parse_target(target), l1d=32 << 10, l2=512 << 10, l3=32 << 20)
    chosen = {}
    for channels in (3, 16):
        X = ta.placeholder((8, channels, 224, 224), "float32", "X")
        W = ta.placeholder((64, channels, 7, 7), "float32", "W")
        H = ta.placeholder((8, 64, 112, 112), "float32", "H")
        (gx,) = ta.JacobianRecursive(ta.topi.nn.conv2d(X, W, 2, 3), [X], H)
        low = ta.lower([gx], [W, H], num_threads=1, target=tgt)
        chosen[channels] = {point: label for point, _, label in low.offered if point.count("/") == 1}
    assert set(chosen[3].values()) == {"strips"}, chosen
    assert set(chosen[16].values()) <= {"padded", "microkernel"}, chosen


def test_pack_cycles_grow_with_the_share_past_the_l2():
    target = parse_target("llvm -mcpu=haswell")
    ctx = PlanContext(opts=None, target=target, outputs=frozenset(), largest=0, readers={}, bodies={},
                      position={})
    lanes = target.lanes("float32")
    costs = []
    for n in (1024, target.l2 // 4, target.l2 // 2, 4 * target.l2, 64 * target.l2):
        A = ta.placeholder((n,), "float32", "A")
        i = ta.reduce_axis((0, n), "i")
        costs.append(pack_cycles(A[i], lanes, ctx))
    assert costs[0] == costs[1] == 1 / lanes  # (in the L2: a vector a cycle)
    assert costs == sorted(costs) and costs[2] < costs[3] < costs[4] < 1 / lanes + SPILLED_PACK


def test_a_scatter_is_priced_by_the_points_its_condition_keeps():
    """A scatter-add's price is one add per point it visits: where the affine part of its condition holds,
    not its loops' box.  A gather from one row of three, ``E[2, idx[i]]``, scatters into that row only: 8
    points, not 24; an embedding's gradient of 8 rows of 64 visits 512 whatever the table's size."""
    from tensorad.codegen.strategies.scatter import Scatter

    target = parse_target("llvm -mcpu=haswell")
    ctx = PlanContext(opts=None, target=target, outputs=frozenset(), largest=0, readers={}, bodies={},
                      position={})

    def price(shape, shape_of_y, read):
        E, idx = ta.placeholder(shape, "float32", "E"), ta.placeholder((8,), "int32", "idx")
        Y = ta.compute(shape_of_y, lambda *i: read(E, idx, *i), name="Y")
        (dE,) = ta.JacobianRecursive(Y, [E], ta.placeholder(Y.shape, "float32", "H"))
        (cand,) = Scatter().match(dE.op, dE.op.body, ctx)
        return cand.strategy.cost(cand, ctx)

    for rows in (1000, 100_000):
        assert price((rows, 64), (8, 64), lambda E, idx, i, j: E[idx[i], j]) == 8 * 64
    assert price((3, 100), (8,), lambda E, idx, i: E[2, idx[i]]) == 8
