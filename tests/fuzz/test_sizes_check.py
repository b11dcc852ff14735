"""The fuzzer's ``sizes`` check: a random program with one extent made a size variable is, bound at
that extent, the program itself, and built once, at a larger size, the program written at that size:
the same bits forward and through its optimized gradient, its raw gradient's values within rounding,
and the same work."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from fuzz import checks  # noqa: E402
from fuzz.program import generate  # noqa: E402
from fuzz.runner import job_for  # noqa: E402

SOURCE = """import tensorad as ta
DT = 'float32'
SIZE = ta.size_var("n", min=2)
X = ta.placeholder((SIZE, 3), DT, name='X')
k = ta.reduce_axis((0, 3), name='k')
Y = ta.compute((SIZE,), lambda i: ta.sum(ta.exp(X[i, k] * {scale}), axis=k), name='Y')
INPUTS = [X]
TENSORS = [Y]
OUT = Y
"""


def test_random_programs_made_symbolic_agree_with_programs_written_at_each_size():
    for seed in range(8):
        job = job_for(generate(seed), seed, checks=("sizes",))
        assert [r["status"] for r in checks.run_checks(job)] == ["ok"], seed


def test_a_symbolic_program_computing_something_else_is_caught():
    static = SOURCE.replace('SIZE = ta.size_var("n", min=2)\n', "").replace("SIZE", "5")
    job = dict(source=static.format(scale=2.0).replace("5", "2"), source64="", dtype="float64", options={},
               data="unit", seed=1, safe=True, checks=["sizes"], all_outputs=True, calling="plain",
               sized={"symbolic": SOURCE.format(scale=2.0), "static": static.format(scale=3.0), "at": 5})
    (result,) = checks.run_checks(job)
    assert result["status"] == "fail" and "at size 5" in result["message"]


TIES = """import tensorad as ta
DT = 'float32'
SIZE = ta.size_var("n", min=1)
x0 = ta.placeholder((SIZE, 9), DT, name='x0')
L0 = ta.topi.add(x0, x0 * 0.5)
r0 = ta.reduce_axis((-1, 0), name='r0')
r1 = ta.reduce_axis((-1, 16), name='r1')
t0 = ta.compute((5, 9), lambda i0, i1: ta.max(L0[(r0 + -2) // 3 % 1, 8 - r0 % 9], axis=[r0, r1],
                                              where=~((r1 % 2 == 1) & (i0 <= 7))), name='t0')
INPUTS = [x0]
TENSORS = [L0, t0]
OUT = t0
"""


def test_a_raw_max_gradient_split_over_ties_agrees_within_rounding():
    """A max over 8 tied values: the raw gradient of the program written at a size splits the ties
    through the winner's flat index, the symbolic one without it, and their float32 sums of the
    shares round differently; the optimized gradients agree to the bit."""
    static = TIES.replace('SIZE = ta.size_var("n", min=1)\n', "").replace("SIZE", "4")
    job = dict(source=TIES.replace('SIZE = ta.size_var("n", min=1)\n', "").replace("SIZE", "1"), source64="",
               dtype="float32", options={}, data="smooth", seed=5000422, safe=True, checks=["sizes"],
               all_outputs=True, calling="plain", sized={"symbolic": TIES, "static": static, "at": 4})
    (result,) = checks.run_checks(job)
    assert result["status"] == "ok", result


ARGMAX_OF_A_MEAN = """import tensorad as ta
DT = 'float64'
def _combine(x, y):
    keep = x[1] >= y[1]
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])
ARGMAX = ta.comm_reducer(_combine, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")
{size}x0 = ta.placeholder(({n},), DT, name='x0')
L3 = ta.topi.mean(x0, axis=0, keepdims=False)
r6 = ta.reduce_axis((-1, 2), name='r6')
r7 = ta.reduce_axis((0, 9), name='r7')
t3_i, t3 = ta.compute((5, 1), lambda i0, i1: ARGMAX((r6 * 7 + r7, L3[()]), axis=[r6, r7], where=r6 >= 1),
                      name='t3')
INPUTS = [x0]
TENSORS = [L3, t3_i, t3]
OUT = t3
"""


def test_a_size_factor_taken_out_of_a_sum_agrees_within_rounding():
    """The gradient of a mean over ``n`` routed through a custom arg-max: written at ``n = 7`` the
    factor ``1/7`` is a constant kept in each term of the head's sum; over a size variable ``1/n`` is
    taken out of the sum.  The two differ in the last bit, and the check compared the optimized
    gradients' bits, failing a correct program; it compares their values within rounding (the forward
    still bit for bit, the work exactly)."""
    static = ARGMAX_OF_A_MEAN.format(size="", n=7)
    job = dict(source=ARGMAX_OF_A_MEAN.format(size="", n=4), source64="", dtype="float64", options={},
               data="unit", seed=8500007, safe=True, checks=["sizes"], all_outputs=True, calling="plain",
               sized={"symbolic": ARGMAX_OF_A_MEAN.format(size='SIZE = ta.size_var("n", min=4)\n', n="SIZE"),
                      "static": static, "at": 7})
    (result,) = checks.run_checks(job)
    assert result["status"] == "ok", result["message"]
