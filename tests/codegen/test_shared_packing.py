"""Matrix products of one kernel that read the same side B through the same map share one packed copy
of it: the first product packs it into a buffer of the kernel (each column block by the thread that runs
it), the later ones read it instead of packing B again (a recurrence's weight, read by every step's
product, was packed once per step).  A step that writes B's buffer ends the sharing.  Oracle: NumPy in
float64, at one and two threads, on an AVX-512 and an AVX2 target (the host's where it cannot run one)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tensorad.codegen.passes.shared_packing import share_packed_sides
from tensorad.codegen.program import Fill, Nest
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta
from tensorad.ir.expr import const

TARGETS = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"]


def _recurrence(steps: int, m: int, n: int, transposed: bool = True):
    """``h <- tanh(h W^T)`` (``transposed``: B read across its rows, packed) or ``tanh(h W)`` (B's rows
    read in place), ``steps`` times, from ``X``."""
    X = ta.placeholder((m, n), "float32", "X")
    W = ta.placeholder((n, n), "float32", "W")
    h = X
    for t in range(steps):
        k = ta.reduce_axis((0, n), f"k{t}")
        if transposed:
            s = ta.compute((m, n), lambda i, j, h=h, k=k: ta.sum(h[i, k] * W[j, k], k), name=f"s{t}")
        else:
            s = ta.compute((m, n), lambda i, j, h=h, k=k: ta.sum(h[i, k] * W[k, j], k), name=f"s{t}")
        h = ta.topi.tanh(s)
    return X, W, h


def _packed(lowered) -> list[str]:
    return [name for name, *_ in lowered.temporaries if ".packed" in name]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tile", [None, (None, None, 64)])
def test_recurrence_packs_its_weight_once_and_matches_numpy(target, tile, rng):
    if not parse_target(target).runs_here(host_target()):
        target = "llvm"
    m, n, steps = 24, 600, 3  # (n: several column blocks, a narrower last panel; KC 64: several k blocks)
    X, W, h = _recurrence(steps, m, n)
    kern = ta.build([h], [X, W], target=target, microkernel=True, parallel_min_work=0, tile=tile)
    assert _packed(kern.lowered) == ["W.packed"]
    notes = [s.note for s in kern.lowered.program.steps if isinstance(s, Nest) and s.attrs.gemm is not None]
    assert len(notes) == steps and "B packed here for the 3 products" in notes[0]
    assert all("B packed before for the 3 products" in note for note in notes[1:])
    x = (rng.standard_normal((m, n)) * 0.5).astype(np.float32)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    want = x.astype(np.float64)
    for _ in range(steps):
        want = np.tanh(want @ w.T.astype(np.float64))
    for threads in (1, 2, 1):  # (each call packs again: a kernel keeps its buffers between calls)
        kern.num_threads = threads
        np.testing.assert_allclose(kern(x, w), want, rtol=1e-4, atol=1e-4)
        w = w[::-1].copy()  # (new weights each call: the shared copy is never stale)
        want = x.astype(np.float64)
        for _ in range(steps):
            want = np.tanh(want @ w.T.astype(np.float64))


def test_a_write_of_the_weight_ends_the_sharing():
    X, W, h = _recurrence(3, 24, 600)
    prog = ta.lower([h], [X, W], target="llvm -mcpu=haswell", microkernel=True).program
    products = [k for k, s in enumerate(prog.steps) if isinstance(s, Nest) and s.attrs.gemm is not None]
    assert [prog.steps[k].attrs.gemm.packed_b.fills for k in products] == [True, False, False]
    # the same program unshared, with a step between the first and second products that writes W's
    # buffer: the first product packs alone, the other two share
    plain = [replace(s, attrs=replace(s.attrs, gemm=replace(s.attrs.gemm, packed_b=None))) if k in products
             else s for k, s in enumerate(prog.steps)]
    steps = plain[:products[1]] + [Fill(prog.buffers[W], const(0.0, "float32"))] + plain[products[1]:]
    temps = [b for b in prog.temps if ".packed" not in b.name]
    shared = share_packed_sides(replace(prog, steps=steps, temps=temps))
    specs = [s.attrs.gemm for s in shared.steps if isinstance(s, Nest) and s.attrs.gemm is not None]
    assert specs[0].packed_b is None
    assert [(s.packed_b.fills, s.packed_b.products) for s in specs[1:]] == [(True, 2), (False, 2)]


def test_a_side_read_in_place_is_not_copied():
    X, W, h = _recurrence(3, 24, 600, transposed=False)
    assert _packed(ta.lower([h], [X, W], target="llvm -mcpu=haswell", microkernel=True)) == []
