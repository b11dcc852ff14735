"""The fuzz oracle on a derivative that is NaN by IEEE's ``0 * inf`` in the chain rule.

A min over an empty box is +inf; a saturated sigmoid (or a
branch never taken, or a ``maximum``'s losing side) gives its operand the adjoint 0; the chain
rule multiplies the two, and IEEE says NaN where finite differences say 0.  PyTorch and JAX give
the same NaN (``torch.sigmoid(x * inf).sum().backward()`` -> ``x.grad = nan``).  The oracle
judges such an element by the derivative's value with strong zeros (``0 * x = 0``:
``evaluate_in_order(strong_zero=True)``), and only where ``ta.evaluate`` in IEEE arithmetic is
NaN too; the elements are counted, and a NaN the interpreter does not give still fails.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from fuzz import checks
from tensorad.reference import evaluate_in_order

SOURCE = """
import tensorad as ta
DT = 'float64'
x0 = ta.placeholder((3,), DT, name='x0')
r0 = ta.reduce_axis((0, 3), name='r0')
m0 = ta.compute((), lambda: ta.min(x0[r0], axis=r0, where=r0 > 5), name='m0')
t0 = ta.compute((3,), lambda i: ta.sigmoid(x0[i] * m0[()] - 2.0), name='t0')
INPUTS = [x0]
TENSORS = [m0, t0]
OUT = t0
"""


def _job(check_names):
    return dict(source=SOURCE, source64=SOURCE, dtype="float64", options={}, data="unit",
                seed=391115, safe=True, checks=list(check_names), all_outputs=False,
                calling="plain", torch=None)


def test_strong_zero_products_follow_the_formula():
    x = ta.placeholder((4,), "float64", name="x")
    y = ta.placeholder((4,), "float64", name="y")
    r = ta.reduce_axis((0, 4), name="r")
    prod = ta.compute((4,), lambda i: x[i] * y[i], name="prod")
    fold = ta.compute((), lambda: ta.prod(x[r] * 1.0, axis=r), name="fold")
    feed = {x: np.array([0.0, 0.0, 2.0, np.inf]), y: np.array([np.inf, np.nan, 3.0, 0.0])}
    ieee = ta.evaluate([prod, fold], feed)
    strong = evaluate_in_order([prod, fold], feed, "numpy", strong_zero=True)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(ieee[0], feed[x] * feed[y])         # [nan, nan, 6, nan]
        assert np.isnan(ieee[1])                                           # 0 * 2 * inf
    np.testing.assert_array_equal(strong[0], [0.0, 0.0, 6.0, 0.0])
    assert strong[1] == 0.0


@pytest.mark.parametrize("check", ["reverse", "jvp", "jacobian"])
def test_a_chain_rule_nan_is_judged_by_its_strong_zero_value(check):
    results = checks.run_checks(_job([check]))
    assert results == [{"check": check, "status": "ok", "chain_nans": results[0].get("chain_nans")}]
    assert results[0]["chain_nans"] > 0


def test_a_nan_the_interpreter_does_not_give_stays():
    """A kernel's NaN where ``ta.evaluate`` is finite (here: a window that is not empty) is
    never replaced: the check still fails on it."""
    job = _job(["reverse"])
    job["source"] = job["source64"] = SOURCE.replace("r0 > 5", "r0 > 0")
    case = checks.Case(job)
    _, feed = case._grad_setup()
    grads = case._gradient()
    right = ta.evaluate(list(grads), feed)
    assert np.isfinite(right[0]).all()
    wrong = [np.where(np.arange(3) == 1, np.nan, right[0])]
    kept = case.chain_rule_nans(wrong, grads, feed)
    assert np.isnan(kept[0][1]) and case.chain_nans == 0
