"""What the generator draws beyond its first versions (the stream ``more``): integer tensors
(runtime ``//`` and ``%``, saturating casts of data, integer reductions), ``ta.topi`` layers,
half storage, data with inf and NaN, and the ways a kernel is called; ``forms``: empty reduction
boxes and computes, float ``//`` and ``%``, multi-output computes, contractions, comparisons
stored as integers; ``forms21``: reductions nested in a reduction's source (reading its axes),
scans, gathers at data-dependent indices, more library layers; and that the forward check's
calling conventions check what they claim."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tensorad as ta  # noqa: E402
from fuzz import data as fdata  # noqa: E402
from fuzz.checks import DLPackOnly, Mismatch, call_as, load, strided  # noqa: E402
from fuzz.program import CALLING, CALLING22, HALF, generate  # noqa: E402

SEEDS = range(800)


def _programs():
    return [generate(s) for s in SEEDS]


def test_every_addition_is_drawn_in_proportion():
    progs = _programs()
    n = len(progs)
    sources = [p.render() for p in progs]
    share = {
        "half storage": sum(p.dtype in HALF for p in progs),
        "special data": sum(p.data == "special" for p in progs),
        "integer computes": sum("lambda" in s and "ta.cast('int" in s for s in sources),
        "runtime //": sum(") // ta.cast('int" in s for s in sources),
        "runtime %": sum(") % ta.cast('int" in s for s in sources),
        "saturating casts of data": sum("* 1e10)" in s for s in sources),
        "integer reductions": sum(", axis=[r" in s and "(ta.cast('int" in s for s in sources),
        "library layers": sum("= ta.topi." in s for s in sources),
        "empty reduction boxes": sum(re.search(r"reduce_axis\(\((-?\d+), \1\)", s) is not None
                                     for s in sources),
        "empty computes": sum(re.search(r"ta.compute\(\([^)]*\b0[,)]", s) is not None for s in sources),
        "float // and %": sum(re.search(r"\) (//|%) (\(|-0.5|0.75)", s) is not None for s in sources),
        "multi-output computes": sum(re.search(r"^t\d+_b, t\d+ = ", s, re.M) is not None for s in sources),
        "contractions": sum(re.search(r"^c\d+ = ", s, re.M) is not None for s in sources),
        "comparisons stored": sum(re.search(r"^m\d+ = ta.compute", s, re.M) is not None for s in sources),
        "half computes stored in half": sum(", dtype=DT)" in s for s in sources),
        "reductions in a reduction's source": sum(re.search(r"\) \* ta\.(sum|max|min|prod)\(", s) is not None
                                                  for s in sources),
        "scans": sum(re.search(r"where=r\d+ (<=|>=|<) i\d+ \+", s) is not None for s in sources),
        "data-dependent gathers": sum(re.search(r"\.take\([^)]*\b(k|m|n|t)\d+(_i)?\[", s) is not None
                                      for s in sources),
        "half roundings inside bodies": sum(re.search(r"ta\.cast\(DT, ta\.cast\('b?float16', ", s) is not None
                                            for s in sources),
        "layers of forms21": sum(re.search(r"^T\d+ = ta.topi", s, re.M) is not None for s in sources),
    }
    share.update(_added_form_shares(progs, sources))
    for calling in CALLING:
        share[calling] = sum(p.calling == calling for p in progs)
    low = {k: v for k, v in share.items() if v < 0.01 * n}
    assert not low, (low, share)
    assert share["plain"] > n // 2  # the additions are a minority of each program's draws
    assert {p.dtype for p in progs} >= {"float16", "bfloat16", "float32", "float64"}


def _added_form_shares(progs, sources) -> dict:
    """The stream ``forms22``: what the coverage survey (``python -m fuzz.coverage``) would
    otherwise count as never drawn."""
    def has(pattern):
        return sum(re.search(pattern, s, re.M) is not None for s in sources)

    return {
        "a reduce axis given bare": has(r"axis=r\d+[,)]"), "operator **": has(r"\) \*\* "),
        "logical not": has(r"~\("), "select on >= or != of data": has(r"ta\.select\(.* (>=|!=) .*, "),
        "// and % by a negative constant": has(r"(//|%) -\d"),
        "casts down inside a body": has(r"ta\.cast\(DT, ta\.cast\('(float32|int32|int64)', "),
        "int64 inputs": has(r"ta\.placeholder\([^)]*\), 'int64'"),
        "layers of forms22": has(r"^U\d+ = "), "three-value combiners": has(r"name='triple'"),
        "generalized_matmul": has(r"generalized_matmul\("),
        "tune": sum("tune" in p.options for p in progs),
        "variants": sum("variants" in p.options for p in progs),
        "microkernel=False": sum(p.options.get("microkernel") is False for p in progs),
        "export calling": sum(p.calling == "export" for p in progs),
        "num_threads calling": sum(p.calling == "threads" for p in progs),
    }


def test_old_seeds_without_additions_are_unchanged():
    """The additions come from a stream of their own: a seed that draws none of them renders
    the program it rendered before (the first versions, ``extras=False``, stay as they were)."""
    same = sum(generate(s, extras=False).render() == generate(s, extras=False).render() for s in range(50))
    assert same == 50
    assert all(generate(s, extras=False).calling == "plain" for s in range(50))
    # the forms of ``forms`` change some programs; ``forms=False`` gives back the ones the
    # regression tests of older seeds pin
    changed = [s for s in range(200) if generate(s).render() != generate(s, forms=False).render()]
    assert 0 < len(changed) < 200
    # those of ``forms21`` too (``forms21=False``: the programs seeds drew before them); without
    # ``forms``, none of ``forms21``
    changed = [s for s in range(200)
               if generate(s, forms22=False).render() != generate(s, forms21=False).render()]
    assert 0 < len(changed) < 100
    assert all(generate(s, forms=False).render() == generate(s, forms=False, forms21=False).render()
               for s in changed)
    # those of ``forms22`` (``forms22=False``, ``python -m fuzz --forms21``: the programs before them)
    old = [generate(s, forms22=False) for s in range(200)]
    changed = [s for s, p in zip(range(200), old) if (p.render(), p.options, p.calling) !=
               ((q := generate(s)).render(), q.options, q.calling)]
    assert 0 < len(changed) < 200
    assert all(generate(s, forms21=False).render() == generate(s, forms21=False, forms22=False).render()
               for s in changed)


def test_small_integer_powers_change_few_programs_and_forms27_false_gives_them_back():
    """The stream ``forms27`` (small integer powers, multiplied under fast math) adds a
    power to some programs; ``forms27=False`` (``python -m fuzz --forms22``) renders the
    programs seeds drew before it, and without the stream ``forms22`` it draws nothing."""
    old = [generate(s, forms27=False) for s in range(300)]
    new = [generate(s, forms49=False) for s in range(300)]  # (the streams after it left out)
    changed = [s for s, p, q in zip(range(300), old, new) if p.render() != q.render()]
    assert 0 < len(changed) < 60
    powers = r"\*\* (3|4|-2|-3)|, -4\.0\)"
    assert all(re.search(powers, new[s].render()) for s in changed)
    assert all(generate(s, forms22=False).render() == generate(s, forms22=False, forms27=False).render()
               for s in changed)


def test_half_integer_and_layer_programs_define_and_evaluate():
    picked = [p for p in _programs()[:400] if p.dtype in HALF or "= ta.topi." in p.render()
              or ") // ta.cast('int" in p.render()][:12]
    new_forms = r"^(c|m)\d+ = |_b, t\d+ = |\(0, "  # ``forms``
    picked += [p for p in _programs()[400:] if re.search(new_forms, p.render(), re.M)][:8]
    picked += [p for p in _programs()[400:] if re.search(r"^T\d+ = |\) \* ta\.(sum|max)\(|where=r\d+ <= i",
                                                         p.render(), re.M)][:8]  # ``forms21``
    forms22 = r"^U\d+ = |\*\* |~\(|axis=r\d+[,)]"
    picked += [p for p in _programs()[:400] if re.search(forms22, p.render(), re.M)][:10]
    for p in picked:
        ns = load(p.render())
        ta.evaluate(list(ns["TENSORS"]), fdata.feed(ns["INPUTS"], p.data, 0))


def test_strided_views_and_dlpack_wrappers():
    a = np.arange(12.0).reshape(3, 4)
    for reverse in (False, True):
        v = strided(a, reverse)
        assert not v.flags.c_contiguous and np.array_equal(v, a)
    w = DLPackOnly(a)
    assert not isinstance(w, np.ndarray) and hasattr(w, "__dlpack__")
    assert np.array_equal(np.from_dlpack(w), a)


def test_out_calling_checks_identity_and_every_element():
    X = ta.placeholder((5,), "float64", name="X")
    Y = ta.compute((5,), lambda i: X[i] * 2.0, name="Y")
    kernel = ta.build([Y], [X])
    x = np.arange(5.0)
    for calling in CALLING + CALLING22:
        (got,) = call_as(kernel, [x], [Y], calling, 0)
        np.testing.assert_array_equal(got, x * 2)

    class Copying:  # returns fresh arrays instead of the out= ones: must be caught
        def __call__(self, *args, out=None):
            return kernel(*args).copy()

    with pytest.raises(Mismatch, match="out="):
        call_as(Copying(), [x], [Y], "out", 0)


@pytest.mark.parametrize("seed", [320104, 320234])
def test_a_gather_index_is_never_a_float_output_of_a_tuple_reduction(seed):
    # a SUMMAX body's first output is named like an argmax's index (``t0_i``) but is a float
    prog = generate(seed)
    ns = load(prog.render())
    ta.evaluate(list(ns["TENSORS"]), fdata.feed(ns["INPUTS"], prog.data, 0))


def test_running_windows_past_their_output_change_some_programs_and_forms49_false_gives_them_back():
    """The stream ``forms49`` adds a running reduction along one axis, its window a prefix or a suffix
    shifted either way (past its own output for a positive shift), written with ``where`` or padded with
    the reducer's identity, to about a tenth of the programs; ``forms49=False`` (``python -m fuzz
    --forms27``) renders the programs seeds drew before it, and without the stream ``forms27`` it draws
    nothing."""
    old = [generate(s, forms49=False) for s in range(300)]
    new = [generate(s) for s in range(300)]
    changed = [s for s, p, q in zip(range(300), old, new) if p.render() != q.render()]
    assert 15 < len(changed) < 60
    sources = [new[s].render() for s in changed]
    assert all(re.search(r"^w\d+(_i)?(, w\d+)? = ", s, re.M) for s in sources)
    assert any(re.search(r"where=r\d+ <=? i\d+ \+ [1-3]\)", s) for s in sources)  # a prefix past its output
    assert any(re.search(r"where=r\d+ >=? i\d+ - [1-3]\)", s) for s in sources)  # a suffix past its output
    assert any(re.search(r"if_then_else\(r\d+ (<=|<|>=|>) i\d+( [+-] \d)?, ", s) for s in sources)  # padded
    assert all(generate(s, forms27=False).render() == generate(s, forms27=False, forms49=False).render()
               for s in changed)
    for s in changed[:6]:
        ns = load(new[s].render())
        ta.evaluate(list(ns["TENSORS"]), fdata.feed(ns["INPUTS"], new[s].data, 0))
