"""A product reading embedding rows, ``C[i, j] = sum_k (E[Ix[i], k] + T[i, k]) * W[k, j]`` with ``T`` a
product the program stores anyway, copied its gathered rows (and so ran as a matrix product) only
while the copy held no more elements than the largest input or output.  The outputs of a model's head
are small beside its activations, so past a few hundred rows the product ran as plain loops: a
Transformer block's static kernel at 64 sequences of 64 tokens took 1.5x the time it takes with the
copy.  A copy may now be as large as the largest buffer the program holds anyway.

Oracle: the program written in NumPy, in float64."""

import numpy as np

import tensorad as ta


def _program(n: int):
    E = ta.placeholder((10, 64), "float64", name="E")
    Ix = ta.placeholder((n,), "int32", name="I")
    X = ta.placeholder((n, 4), "float64", name="X")
    U = ta.placeholder((4, 64), "float64", name="U")
    W = ta.placeholder((64, 32), "float64", name="W")
    r = ta.reduce_axis((0, 4), name="r")
    T = ta.compute((n, 64), lambda i, k: ta.sum(X[i, r] * U[r, k], axis=r), name="T")
    k = ta.reduce_axis((0, 64), name="k")
    C = ta.compute((n, 32), lambda i, j: ta.sum((E[Ix[i], k] + T[i, k]) * W[k, j], axis=k), name="C")
    return [C], [E, Ix, X, U, W]


def test_a_gathered_copy_larger_than_every_argument_is_offered():
    n = 300  # (the copy's 300 x 64 elements: more than any input's or the output's, as many as T's)
    outputs, inputs = _program(n)
    lowered = ta.lower(outputs, inputs, target="llvm -mcpu=haswell")
    offered = {point: (labels, chosen) for point, labels, chosen in lowered.offered}
    point = next(p for p, (labels, _) in offered.items() if p.startswith("C"))
    assert "gathered" in offered[point][0], offered
    rng = np.random.default_rng(0)
    e, x, u, w = (rng.standard_normal(s) for s in ((10, 64), (n, 4), (4, 64), (64, 32)))
    i = rng.integers(0, 10, n).astype(np.int32)
    kernel = ta.build(outputs, inputs, choices={point: "gathered"}, num_threads=1)
    assert "E.rows" in str(kernel.lowered)
    np.testing.assert_allclose(kernel(e, i, x, u, w), (e[i] + x @ u) @ w, rtol=1e-12, atol=1e-12)
