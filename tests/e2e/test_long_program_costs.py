"""The compile cost of a long program grows linearly in its length ("a 10,000-op
chain and its gradient build in seconds").

Growth is measured by counting -- isl conversions, LLVM instructions per function -- at two
lengths, never by the clock; answers are checked against a NumPy recurrence written here.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from blocks import tanh_chain, tanh_chain_gradient

import tensorad as ta
from tensorad.poly.affine import IndexSpace

F = "float64"


def _chain_gradient(n: int):
    X, Y = tanh_chain(n, 16, F)
    L = ta.compute((), lambda: Y[0] + Y[9], name="L")
    (g,) = ta.gradient(L, [X])
    return X, g


def _function_sizes(text: str) -> dict[str, int]:
    """Instructions per defined function of an LLVM module's text."""
    sizes: dict[str, int] = {}
    name = None
    for line in text.splitlines():
        if line.startswith("define"):
            name = re.search(r'@"?([\w.]+)"?\(', line).group(1)
            sizes[name] = 0
        elif line.startswith("}"):
            name = None
        elif name is not None and line.startswith("  "):
            sizes[name] += 1
    return sizes


def test_the_glue_of_a_long_gradient_is_functions_of_bounded_size():
    # P_main loaded every buffer's pointer at its entry and then ran every step: one function
    # growing with the program, thousands of pointers live across it (LLVM's register
    # allocator took 10 of 14 CPU-s at 3,000 steps); it now calls a function per 64 steps,
    # each loading the pointers its own steps pass
    from tensorad.codegen.llvm.emit import GLUE_OPT_LIMIT, ModuleEmitter

    X, g = _chain_gradient(200)
    low = ta.lower([g], [X])
    assert len(low.program.steps) > 2 * GLUE_OPT_LIMIT
    text = str(ModuleEmitter(low.program, "p", use_gomp=False).emit())
    bodies = dict(re.findall(r'define void @"(p_\w+)"\(.*?\n(.*?)\n}', text, re.S))
    glue = {k: v for k, v in bodies.items() if "_nest" not in k and "_math" not in k}
    steps = {k: len(re.findall(r'call void @"(p_nest\d+|llvm\.memset[\w.]*)"', v)) for k, v in glue.items()}
    assert max(steps.values()) <= GLUE_OPT_LIMIT, steps
    # a run of repeated steps (codegen/llvm/glue_table.py) is a loop over a table: its steps run once per row
    runs = 0
    for k, v in glue.items():
        m = re.fullmatch(r"p_run(\d+)", k)
        if m:
            table = rf'@"p_table{m.group(1)}" = private constant \[(\d+) x i32\]'
            size = int(re.search(table, text).group(1))
            steps[k] *= size // len(re.findall(r"= load i32", v))
            runs += 1
    assert runs and sum(steps.values()) >= len(low.program.steps), steps
    for k, v in glue.items():  # a pointer is loaded once per function, only where it is passed
        loads = re.findall(r'(%"?[.\w]+"?) = load ptr', v)
        used = set(re.findall(r'ptr (%"?[.\w]+"?)[,)]', v))
        assert len(loads) == len(set(loads)) and set(loads) <= used | {"%\".1\""}, k


@pytest.mark.parametrize("threads", [1, 2])
def test_a_long_gradient_with_split_glue_is_right(threads):
    n = 100  # (steps: 3 glue parts)
    X, g = _chain_gradient(n)
    x = np.linspace(-1.5, 1.5, 16)
    want = tanh_chain_gradient(x, n)
    np.testing.assert_allclose(ta.evaluate(g, {X: x}), want, rtol=1e-10, atol=1e-300)
    # (parallel_min_work=0: parallel nests load their own pointers from the array)
    kern = ta.build([g], [X], num_threads=threads, parallel_min_work=0, cache=False)
    np.testing.assert_allclose(kern(x), want, rtol=1e-10, atol=1e-300)
    if threads == 1:
        checked = ta.build([g], [X], checked=True, cache=False)
        np.testing.assert_allclose(checked(x), want, rtol=1e-10, atol=1e-300)


def test_a_violation_in_a_long_program_stops_it_with_an_index_error():
    # a gather under mode="raise" in the first of 80 stored steps: the part of the glue that
    # ran it stops, and so does the program (the record is tested after each part)
    idx = ta.placeholder((8,), "int32", name="I")
    X = ta.placeholder((8,), F, name="X")
    Y = ta.topi.take(X, idx, mode="raise")
    steps = []
    for k in range(80):
        Y = (lambda P: ta.compute((8,), lambda i: ta.tanh(P[i]) * 0.5 + 0.25, name=f"c{k}"))(Y)
        steps.append(Y)
    kern = ta.build([Y], [X, idx], materialize=steps, fuse=False, cache=False)
    assert kern.lowered.text.count("# nest") >= 80
    x = np.linspace(-1, 1, 8)
    good = np.arange(8, dtype=np.int32)[::-1].copy()
    want = x[good]
    for _ in range(80):
        want = np.tanh(want) * 0.5 + 0.25
    np.testing.assert_allclose(kern(x, good), want, rtol=1e-12)
    bad = good.copy()
    bad[3] = 8
    with pytest.raises(IndexError):
        kern(x, bad)


def test_footprints_and_bounds_of_a_long_gradient_take_few_isl_conversions(monkeypatch):
    # every read converted its reader's box and guards to isl in a space of the read tensor's
    # own axes (a new space per tensor: 3 boxes per step), and every read X[i] of a compute's
    # own in-range variable was proved with isl; tensors of one shape now share one space
    lower_module = sys.modules["tensorad.codegen.lower"]
    calls = {"box": 0}
    real_box = IndexSpace._make_box

    def counting(self, *args, **kwargs):
        calls["box"] += 1
        return real_box(self, *args, **kwargs)

    monkeypatch.setattr(IndexSpace, "_make_box", counting)
    counts = {}
    for n in (40, 80):
        X, g = _chain_gradient(n)
        calls["box"] = 0
        lower_module.lower([g], [X], name=f"boxes{n}")
        counts[n] = calls["box"]
    assert counts[80] <= 2.3 * counts[40], counts
    assert counts[80] <= 2.5 * 80, counts  # (391 before)


def test_reuse_of_stored_values_tries_few_candidates_in_a_long_gradient(monkeypatch):
    # each stored tanh/sigmoid step was matched against every product of every later reader's
    # body (about 190 tries per step); candidates are now the nodes whose operands have the
    # pattern's operations
    inline_module = sys.modules["tensorad.codegen.passes.buffers"]
    calls = {"n": 0}
    real = inline_module.match_pattern

    def counting(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(inline_module, "match_pattern", counting)
    counts = {}
    for n in (40, 80):
        X, g = _chain_gradient(n)
        calls["n"] = 0
        ta.lower([g], [X], name=f"reuse{n}")
        counts[n] = calls["n"]
    assert counts[80] <= 2.3 * counts[40] and counts[80] <= 10 * 80, counts


def test_nests_alike_up_to_names_share_one_isl_ast(monkeypatch):
    # each fused group of a long gradient (8 chain steps over the 2 points L reads) is a nest; nests
    # whose statements differ only in names and bodies give one union map, whose AST the lower call
    # keeps: a few builds (the chain's steps, its ends, a step cut into guard pieces) however many
    # nests the chain has
    import islpy as isl

    calls = {"ast": 0}
    real = isl.AstBuild.node_from_schedule_map

    def counting(self, *args):
        calls["ast"] += 1
        return real(self, *args)

    monkeypatch.setattr(isl.AstBuild, "node_from_schedule_map", counting)
    nests = {}
    for n in (40, 80, 160):
        X, g = _chain_gradient(n)
        calls["ast"] = 0
        nests[n] = ta.lower([g], [X], name=f"asts{n}").text.count("# nest")
        assert calls["ast"] <= 4, (n, calls["ast"], nests[n])
    assert nests[160] > nests[80] > nests[40] >= 5, nests


def test_footprints_of_a_long_gradient_convert_a_constant_number_of_conditions(monkeypatch):
    # every read's guard (the footprint condition of the step it reads, over that step's own
    # variables) was converted to isl, 2 per step; reads alike up to their variables' names
    # now share one image: the conversions inside shrink_to_footprints do not grow with n
    lower_module = sys.modules["tensorad.codegen.lower"]
    calls = {"cond": 0, "inside": False}
    real_cond, real_shrink = IndexSpace.cond, lower_module.shrink_to_footprints

    def counting(self, *args, **kwargs):
        calls["cond"] += calls["inside"]
        return real_cond(self, *args, **kwargs)

    def shrink(*args, **kwargs):
        calls["inside"] = True
        try:
            return real_shrink(*args, **kwargs)
        finally:
            calls["inside"] = False

    monkeypatch.setattr(IndexSpace, "cond", counting)
    monkeypatch.setattr(lower_module, "shrink_to_footprints", shrink)
    counts = {}
    for n in (40, 80, 160):
        X, g = _chain_gradient(n)
        calls["cond"] = 0
        lower_module.lower([g], [X], name=f"fps{n}")
        counts[n] = calls["cond"]
    assert max(counts.values()) <= 4, counts


def test_a_long_gradients_footprints_are_a_few_set_objects(monkeypatch):
    # each step's footprint is the union of its readers' (shared) images: one new isl set per
    # step, each printed to find its guard; now one union per pair of set objects, so the
    # footprints are a few objects (the readers that differ: a few adjoints the gradient
    # stores), each converted to a guard once
    import tensorad.codegen.passes.footprint as footprint

    seen: dict[int, object] = {}
    real_guard = footprint._guard

    def guard(op, fp, call):
        seen[id(fp)] = fp  # (kept: ids are not reused)
        return real_guard(op, fp, call)

    monkeypatch.setattr(footprint, "_guard", guard)
    counts = {}
    for n in (40, 160):
        X, g = _chain_gradient(n)
        seen.clear()
        ta.lower([g], [X], name=f"fpobj{n}")
        counts[n] = len(seen)
    x = np.random.default_rng(4).standard_normal(16)  # (built with the shared footprints)
    np.testing.assert_allclose(ta.build([g], [X])(x), tanh_chain_gradient(x, 160), rtol=1e-9)
    assert max(counts.values()) <= 6, counts  # (was about one per step: 160 at n = 160)


def test_speculation_rebuilds_no_body_without_a_data_dependent_choice(monkeypatch):
    # a long gradient's steps are if_then_else(footprint, body, 0): an affine guard, never
    # made eager -- each body was rebuilt anyway, one rewrite per step
    import tensorad.codegen.passes.speculate as speculate

    rebuilt = []
    real_rewrite = speculate.rewrite
    monkeypatch.setattr(speculate, "rewrite", lambda *a, **k: rebuilt.append(1) or real_rewrite(*a, **k))
    X, g = _chain_gradient(40)
    kern = ta.build([g], [X], cache=False)
    assert not rebuilt
    x = np.random.default_rng(4).standard_normal(16)
    np.testing.assert_allclose(kern(x), tanh_chain_gradient(x, 40), rtol=1e-9)
    W = ta.placeholder((8,), "int32", name="W")
    H = ta.placeholder((8,), F, name="H")
    Y = ta.compute((8,), lambda i: ta.if_then_else(W[i] == 1, H[i] * 2.0, 0.0), name="Y")
    assert "select" in str(ta.lower([Y], [W, H])) and rebuilt  # (a data test: made eager)


def _windowed_chain(n: int, size: int = 12):
    """``n`` steps whose statements are alike but for their domains and read offsets: step
    ``k`` is ``tanh(P[i + s]) * 0.9 + P[i]`` where ``i + s < size`` (``s = k % 3``), else 0."""
    def step(P, s: int, k: int):
        return ta.compute((size,), lambda i: ta.if_then_else(
            i + s < size, ta.tanh(P[i + s]) * 0.9 + P[i], 0.0), name=f"w{k}")

    X = ta.placeholder((size,), F, name="X")
    Y, steps = X, []
    for k in range(n):
        Y = step(Y, k % 3, k)
        steps.append(Y)
    return X, Y, steps


def _windowed_reference(x: np.ndarray, n: int) -> np.ndarray:
    y = x.copy()
    for k in range(n):
        s, z = k % 3, np.zeros_like(y)
        z[:len(y) - s] = np.tanh(y[s:]) * 0.9 + y[:len(y) - s]
        y = z
    return y


@pytest.mark.parametrize("fuse", [True, False])
def test_nests_alike_but_for_domains_and_offsets_keep_their_own_loops(fuse):
    # the memo of isl ASTs and of footprint images is keyed on the affine data: steps whose
    # statements differ only in domains (i + s < 12) and read offsets must not share them
    n = 14
    X, Y, steps = _windowed_chain(n)
    x = np.linspace(-1.2, 1.3, 12)
    kern = ta.build([Y], [X], materialize=steps[:-1], fuse=fuse, cache=False)
    np.testing.assert_allclose(kern(x), _windowed_reference(x, n), rtol=1e-12, atol=1e-14)
    # three points of the last step read: every step is computed on its footprint only, which
    # differ by the offsets
    Z = ta.compute((3,), lambda j: Y[j + 2], name="Z")
    kern = ta.build([Z], [X], fuse=fuse, cache=False)
    np.testing.assert_allclose(kern(x), _windowed_reference(x, n)[2:5], rtol=1e-12, atol=1e-14)
    # and so does its gradient
    L = ta.compute((), lambda: Y[0] * 2.0 + Y[5] + Y[11], name="L")
    (g,) = ta.gradient(L, [X])
    want = ta.evaluate(g, {X: x})
    got = ta.build([g], [X], fuse=fuse, cache=False)(x)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)
    assert np.count_nonzero(want) > 0
