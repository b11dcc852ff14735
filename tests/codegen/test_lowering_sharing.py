"""Equal groups are lowered once per ``lower`` call, the others renamed (a long
chain's lowering: :mod:`tensorad.codegen.loops.shared_nests`).

Counted, never timed: a chain's groups are lowered a handful of times, not once each; the
program printed is the one lowering every group on its own prints (names, notes, loops);
groups that differ only in a constant, a shape or a dtype are each lowered; kernels give the
answers of NumPy formulas and float64 finite differences.
"""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest
from blocks import chain_step
from tensorad.codegen.llvm.emit import ModuleEmitter

import tensorad as ta

lowering = importlib.import_module("tensorad.codegen.lower")
F = "float64"


@pytest.fixture
def lowered(monkeypatch) -> list:
    """The groups ``_lower_one_group`` lowers (each call appends its group)."""
    calls: list = []
    real = lowering._lower_one_group

    def counting(g, *args, **kwargs):
        calls.append(g)
        return real(g, *args, **kwargs)

    monkeypatch.setattr(lowering, "_lower_one_group", counting)
    return calls


def _unshared_text(monkeypatch, outputs, inputs, **opts) -> str:
    """The program as lowering every group on its own prints it."""
    with monkeypatch.context() as m:
        shared_nests = importlib.import_module("tensorad.codegen.loops.shared_nests")
        m.setattr(shared_nests, "group_key", lambda *args: None)
        return ta.lower(outputs, inputs, **opts).text


def _sigmoid(p):
    return 1 / (1 + np.exp(-p))


def _reduce_chain(n: int, centred: bool = True):
    """``(X, L, forward, links)``: :func:`blocks.tanh_chain`'s links with every 4th one
    subtracting the mean (when ``centred``), a scalar reading the last link at two points,
    the same in NumPy, and the links."""
    X = ta.placeholder((16,), F, name="X")
    links = [X]
    for k in range(n):
        links.append(chain_step(links[-1], k, 4 if centred else None))
    Y = links.pop()

    def forward(x):
        y = x
        for k in range(n):
            y = (y - y.mean() if centred and k % 4 == 3 else np.tanh(y) * 0.9 if k % 2
                 else _sigmoid(y) + y * 0.5)
        return y[0] + y[9]

    return X, ta.compute((), lambda: Y[0] + Y[9], name="L"), forward, links[1:]


@pytest.mark.parametrize("centred", [False, True])
def test_a_chain_gradient_lowers_a_few_groups_and_prints_as_before(lowered, monkeypatch, rng, numeric_grad,
                                                                    centred):
    X, L, forward, _ = _reduce_chain(160, centred)
    (g,) = ta.gradient(L, [X])
    low = ta.lower([g], [X])
    nests = low.text.count("# nest")
    assert nests >= 20
    assert len(lowered) <= 10, (len(lowered), nests)  # (was one lowering per nest)
    assert low.text == _unshared_text(monkeypatch, [g], [X])
    x = rng.uniform(-1, 1, 16)
    got = np.asarray(ta.build([g], [X], num_threads=1)(x))
    (want,) = numeric_grad(forward, [x])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_emission_takes_renamed_nests_from_their_source(lowered):
    # LLVM functions are emitted from the groups lowered; the renamed nests' bodies are never
    # made for a build (only a printout needs them)
    X, L, _, _ = _reduce_chain(96)
    (g,) = ta.gradient(L, [X])
    low = ta.lower([g], [X])
    renamed = [s for s in low.program.steps if type(s).__name__ == "RenamedNest"]
    assert len(renamed) >= 10
    text = str(ModuleEmitter(low.program, "p").emit())
    assert len(re.findall(r'define void @"p_nest\d+"', text)) <= len(lowered)
    assert not any(s.made for s in renamed)
    assert low.text and all(s.made for s in renamed)


def test_the_forward_chain_prints_as_before(lowered, monkeypatch):
    X, L, _, links = _reduce_chain(64)
    opts = dict(fuse=False, materialize=links)
    low = ta.lower([L], [X], **opts)
    assert len(lowered) <= 8 and low.text.count("# nest") > 64
    assert low.text == _unshared_text(monkeypatch, [L], [X], **opts)


def _alike(make, variants):
    """One output per variant, each ``make(variant, k)``: groups alike but for the variant."""
    return [make(v, k) for k, v in enumerate(variants)]


def test_groups_differing_in_a_constant_shape_or_dtype_are_each_lowered(lowered, rng):
    # unfused (one nest each), alike up to names but for one constant, a reduction's extent
    # or a dtype: none may take another's loops
    def summed(variant, k):
        c, width, dtype = variant
        P = ta.placeholder((4, width), dtype, name=f"P{k}")
        r = ta.reduce_axis((0, width), name="r")
        return P, ta.compute((4,), lambda i: ta.sum(P[i, r] * c, axis=r), name=f"S{k}")

    variants = [(0.5, 8, F), (0.25, 8, F), (0.5, 9, F), (0.5, 8, "float32"), (0.5, 8, F)]
    made = _alike(summed, variants)
    ins, outs = [p for p, _ in made], [s for _, s in made]
    low = ta.lower(outs, ins, fuse=False)
    assert low.text.count("# nest") == 5
    assert len(lowered) == 4  # (the last is the first again)
    arrays = [rng.uniform(-1, 1, (4, w)).astype(d) for _, w, d in variants]
    got = ta.build(outs, ins, fuse=False, num_threads=1)(*arrays)
    for (c, _, dtype), a, y in zip(variants, arrays, got):
        np.testing.assert_allclose(np.asarray(y), (a.astype(np.float64) * c).sum(axis=1),
                                   rtol=1e-6 if dtype == "float32" else 1e-12)


def test_one_name_renamed_two_ways_is_lowered_afresh(lowered, monkeypatch):
    # two groups alike, the first's ops named alike (``A`` twice): its nest's name and note
    # cannot be renamed into the second's (``S``, ``Y``), which is lowered on its own
    def pair(names):
        P = ta.placeholder((4, 8), F, name=names[0])
        r = ta.reduce_axis((0, 8), name="r")
        S = ta.compute((4,), lambda i: ta.sum(P[i, r], axis=r), name=names[1])
        return P, ta.compute((4,), lambda i: S[i] * 2.0, name=names[2])

    (P0, Y0), (P1, Y1) = pair(("Q", "A", "A")), pair(("P", "S", "Y"))
    text = ta.lower([Y0, Y1], [P0, P1]).text
    shared = len(lowered)
    assert text == _unshared_text(monkeypatch, [Y0, Y1], [P0, P1])
    assert shared == len(lowered) - shared == text.count("# nest")
    assert "# nest S" in text and "epilogue Y fused" in text


def test_lowering_walks_each_body_once_and_lowers_the_same_without_kept_walks(monkeypatch):
    rewrite = importlib.import_module("tensorad.ir.rewrite")

    walks = []
    real = rewrite._walk
    monkeypatch.setattr(rewrite, "_walk", lambda root: (root.src and walks.append(root)) or real(root))
    X = ta.placeholder((16,), "float64", name="X")
    Y = X
    for k in range(120):
        scale = 0.9 if k % 2 else 0.5
        Y = (lambda P, c: ta.compute((16,), lambda i: ta.tanh(P[i]) * c, name=f"t{k}"))(Y, scale)
    L = ta.compute((), lambda: Y[0] + Y[9], name="L")
    (g,) = ta.gradient(L, [X])
    walks.clear()
    kept = ta.lower([g], [X])
    assert len(walks) <= 2 * len(set(walks)), (len(walks), len(set(walks)))  # (each root once)
    monkeypatch.setattr(rewrite, "KEPT_NODES", 0)  # (nothing kept: every walk afresh)
    walks.clear()
    alone = ta.lower([g], [X])
    assert len(walks) >= 5 * len(set(walks)), (len(walks), len(set(walks)))
    assert kept.text == alone.text
