"""Products that read a side transposed (``X @ W.T``, a dense layer's forward) pack it with the library's
transposing packer (codegen/gemm/pack_routines.py).

A panel's rows are read side by side, more streams than the hardware's prefetchers follow: a skinny
product whose weight comes from memory (32 rows, a 3000 x 10000 weight) spends much of its time packing
it.  Each row of a plain block asks for its line in the row one panel on, into L2, a panel before the
packer reads it (that product runs in about 0.8x the CPU time it takes when each row asks for its line
2 KB on along itself; one AVX2 core).  The tests read the packer's IR (no timing) and check results
against NumPy's float64 formula at odd sizes (rows 1, 3, 17; ``K`` and ``N`` not multiples of the
vector width, a last panel whose rows ask for their own lines), at one and two threads, and against the
checked build's plain loops."""

import re

import numpy as np
import pytest
from tensorad.codegen.gemm import descriptor as gd
from tensorad.codegen.gemm import library as gemmlib
from tensorad.codegen.gemm.contraction import register_tile
from tensorad.codegen.target import parse_target

import tensorad as ta

HASWELL = "llvm -mcpu=haswell"


@pytest.mark.parametrize("side", ["A", "B"])
def test_the_transposing_packer_asks_for_the_next_panels_rows(side):
    target = parse_target(HASWELL)
    mr, nr = register_tile(target, "float32")
    text = gemmlib.piece_ir("float32", mr, nr, (side, gd.TRANSPOSE), target)
    main = re.split(r"^define ", text, flags=re.M)[1].split("\n}\n")[0]  # the packer (not its masked block)
    loads = re.findall(r'= load <\d+ x float>, ptr (%"?[\w.]+"?)', main)
    fetch = r'call void @"?llvm\.prefetch\.p0"?\(ptr (%"?[\w.]+"?), i32 0, i32 2, i32 1\)'  # (into L2)
    fetched = re.findall(fetch, main)
    # a line of another row per row of a plain block (the next panel's, from the rows' table)
    assert len(fetched) == len(loads) == (mr if side == "A" else nr) and not set(fetched) & set(loads)
    assert f"i64 {mr if side == 'A' else nr}" in main


@pytest.mark.parametrize("rows", [1, 3, 17])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_product_with_a_transposed_side_matches_numpy(rows, threads):
    n, k = 37, 700
    X = ta.placeholder((rows, k), "float32", "X")
    W = ta.placeholder((n, k), "float32", "W")
    r = ta.reduce_axis((0, k), "r")
    C = ta.compute((rows, n), lambda i, j: ta.sum(X[i, r] * W[j, r], axis=r), name="C")
    rng = np.random.default_rng(rows * 10 + threads)
    x = rng.uniform(-1, 1, (rows, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    expect = x.astype(np.float64) @ w.astype(np.float64).T
    got = ta.build([C], [X, W], microkernel=True, num_threads=threads)(x, w)
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)
    plain = ta.build([C], [X, W], checked=True)(x, w)
    np.testing.assert_allclose(got, plain, rtol=1e-4, atol=1e-4)
