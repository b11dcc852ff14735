"""The fuzz oracle on integers made from float data (fuzz/checks.Case._compare_all).

A float32 program that stores ``int64(erf(x) * 1e10)``: the kernel's erf was one ulp
below ``evaluate``'s, which moved the integer by about 600, and the exact integer comparison
failed a right kernel.  Such an integer is judged as a float of the program's dtype; an integer
computed from indices alone is still compared exactly, and a far integer still fails.  The same
in a float16 program, whose arithmetic is float32's: half dtypes were
judged at float64's tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from fuzz import checks

SOURCE = """
import tensorad as ta
DT = 'float32'
x0 = ta.placeholder((4,), DT, name='x0')
k0 = ta.compute((4,), lambda i: ta.cast('int64', ta.erf(x0[i]) * 1e10), name='k0')
k1 = ta.compute((4,), lambda i: ta.cast('int64', i * 3 + 1), name='k1')
INPUTS = [x0]
TENSORS = [k0, k1]
OUT = k0
"""


def _case(dtype="float32"):
    job = dict(source=SOURCE.replace("'float32'", repr(dtype)),
               source64=SOURCE.replace("'float32'", "'float64'"), dtype=dtype,
               options={}, data="unit", seed=151391, safe=False, checks=["forward"], all_outputs=True,
               calling="plain", torch=None)
    case = checks.Case(job)
    case.feed[case.inputs[0]] = np.array([0.3, -0.7, 0.05, 1.1], dtype)
    return case, *case._reference()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_an_ulp_of_the_float_under_an_integer_passes(dtype):
    case, want, ref64 = _case(dtype)
    got = [np.array(w, copy=True) for w in want]
    got[0] = got[0] - np.round(np.abs(got[0]) * 6e-8).astype(np.int64)  # one float32 ulp of erf
    case._compare_all("build", got, want, ref64)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("k, delta", [(0, 10**8), (1, 1)])
def test_a_far_integer_or_a_wrong_index_integer_fails(k, delta, dtype):
    case, want, ref64 = _case(dtype)
    got = [np.array(w, copy=True) for w in want]
    got[k][1] += delta
    with pytest.raises(checks.Mismatch, match=f"k{k}"):
        case._compare_all("build", got, want, ref64)


def test_only_integers_cast_from_floats_are_judged_as_floats():
    case = _case()[0]
    assert [checks._casts_floats(t) for t in case.outputs] == [True, False]
