"""A sum's windowed operand stored in place of the elementwise tensor it reads (codegen/passes/buffers.py,
``store_operands``).

Oracles: NumPy formulas written here; the structure is read from ``ta.lower``'s text (which tensors are
allocated, what the product reads) and the stores are counted by ``.work``, never timed.
"""

import numpy as np

import tensorad as ta

RNG = np.random.default_rng(5)
N, C, F, S = 2, 4, 3, 6


def _program(value=lambda t, u: ta.topi.nn.relu(t), plain_too=False):
    """``T``, ``U``: batch norms of ``Z`` (four reads, so stored); ``WG``: a 3x3 weight gradient reading
    ``value(T, U)`` through nine windows (``U`` another stored tensor); ``TS``, ``US``: per-channel sums
    reading ``T``, ``U`` once per point;
    ``plain_too``: a second weight gradient reading ``T`` itself through windows."""
    Z = ta.placeholder((N, C, S, S), "float32", "Z")
    m, s, b = (ta.placeholder((C,), "float32", name) for name in ("m", "s", "b"))
    H = ta.placeholder((N, F, S, S), "float32", "H")
    G = ta.placeholder((N, C, S, S), "float32", "G")
    T = ta.compute(Z.shape, lambda n, c, y, x: (Z[n, c, y, x] - m[c]) * s[c] + b[c], name="T")
    U = ta.compute(Z.shape, lambda n, c, y, x: (Z[n, c, y, x] * s[c] - b[c]) * m[c], name="U")
    A = value(T, U)
    n, yy, xx = (ta.reduce_axis((0, e), name) for e, name in ((N, "n"), (S, "yy"), (S, "xx")))

    def weight_grad(f, c, ry, rx, A=A):
        y, x = yy + ry - 1, xx + rx - 1
        inside = (y >= 0) & (y < S) & (x >= 0) & (x < S)
        return ta.sum(H[n, f, yy, xx] * ta.if_then_else(inside, A[n, c, y, x], 0.0), axis=[n, yy, xx])
    WG = ta.compute((F, C, 3, 3), weight_grad, name="WG")
    more = [ta.compute((F, C, 3, 3), lambda *i: weight_grad(*i, A=T), name="WT")] if plain_too else []
    k = [ta.reduce_axis((0, e), name) for e, name in ((N, "k0"), (S, "k1"), (S, "k2"))]
    def masked_sum(V):
        def body(c):
            return ta.sum(ta.select(V[k[0], c, k[1], k[2]] <= 0.0, 0.0, G[k[0], c, k[1], k[2]]), axis=k)
        return ta.compute((C,), body, name=f"{V.name}S")
    return [WG, masked_sum(T), masked_sum(U)] + more, [Z, m, s, b, H, G], T


def _numpy(z, m, s, b, h, g, with_u=False):
    m, s, b = (v[None, :, None, None] for v in (m, s, b))
    t = (z - m) * s + b
    a = np.pad(np.maximum(t + with_u * (z * s - b) * m, 0), ((0, 0), (0, 0), (1, 1), (1, 1)))
    wg = np.zeros((F, C, 3, 3))
    for ry in range(3):
        for rx in range(3):
            wg[:, :, ry, rx] = np.einsum("nfyx,ncyx->fc", h, a[:, :, ry:ry + S, rx:rx + S])
    u = (z * s - b) * m
    return wg, np.where(t <= 0, 0, g).sum(axis=(0, 2, 3)), np.where(u <= 0, 0, g).sum(axis=(0, 2, 3))


def _allocated(text: str) -> list[str]:
    return [line.split()[1].rstrip(":") for line in text.splitlines() if line.strip().startswith("allocate")]


def test_relu_read_through_windows_is_stored_in_place_of_its_input():
    outputs, inputs, _ = _program()
    f = ta.lower(outputs, inputs)
    text = str(f)
    assert "T.operand" in _allocated(text) and "T" not in _allocated(text)
    product = text.split("# nest WG")[1].split("# nest")[0]
    assert "T.operand[" in product and "select" not in product and "max" not in product
    arrays = [RNG.standard_normal(t.shape).astype("float32") for t in inputs]
    for got, want in zip(ta.build(outputs, inputs)(*arrays), _numpy(*[a.astype("float64") for a in arrays])):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_stored_operand_keeps_the_stores_as_many():
    # T forced to a buffer keeps it (and its readers compute the ReLU); the work is the same
    outputs, inputs, T = _program()
    forced = ta.lower(outputs, inputs, materialize=[T])
    assert "T" in _allocated(str(forced)) and "T.operand" not in _allocated(str(forced))
    assert ta.lower(outputs, inputs).work == forced.work


def test_plain_read_through_windows_keeps_its_tensor():
    # nothing is computed per read: T stays stored, no operand
    outputs, inputs, _ = _program(value=lambda t, u: t)
    allocated = _allocated(str(ta.lower(outputs, inputs)))
    assert "T" in allocated and "T.operand" not in allocated


def test_tensor_another_sum_reads_through_windows_keeps_its_buffer():
    # inlined, T would be computed nine times per point by that sum: T stays stored, no operand
    outputs, inputs, _ = _program(plain_too=True)
    allocated = _allocated(str(ta.lower(outputs, inputs)))
    assert "T" in allocated and "T.operand" not in allocated


def test_operand_of_two_stored_tensors_is_computed_after_both():
    # relu(T + U): the operand is stored in T's place, after U, which it reads
    outputs, inputs, _ = _program(value=lambda t, u: ta.topi.nn.relu(t + u))
    allocated = _allocated(str(ta.lower(outputs, inputs)))
    assert allocated == ["U", "T.operand"]
    arrays = [RNG.standard_normal(t.shape).astype("float32") for t in inputs]
    wants = _numpy(*[a.astype("float64") for a in arrays], with_u=True)
    for got, want in zip(ta.build(outputs, inputs)(*arrays), wants):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
