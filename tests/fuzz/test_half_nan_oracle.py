"""A bfloat16 NaN judged equal to itself.

The fuzzer's bit-for-bit comparison (the ``sizes`` check: a program over a size variable, bound at
its own size, against the program written at that size) counts NaN equal to NaN for floating
arrays; a bfloat16 array is NumPy's kind ``V``, not ``f``, and its NaN counts equal too, so that
``0 * min(empty)`` (``0 * inf``) stored in bfloat16 is no mismatch.  Oracle: NumPy's IEEE
arithmetic (``0 * inf`` is NaN in both programs)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from fuzz import checks  # noqa: E402

PROGRAM = """import tensorad as ta
DT = 'bfloat16'
{size}
x0 = ta.placeholder(({n}, 3), DT, name='x0')
r2 = ta.reduce_axis((0, 4), name='r2')
t1 = ta.compute((3,), lambda i0: ta.cast(DT, (i0 - 2) % 3) * ta.min(ta.const(0.5, DT), axis=[r2],
                where=(r2 % 2 == 0) & (i0 <= 0)), name='t1', dtype=DT)
INPUTS = [x0]
TENSORS = [t1]
OUT = t1
"""


def test_the_sizes_check_counts_a_bfloat16_nan_equal_to_itself():
    static = PROGRAM.format(size="", n=16)
    job = {"source": static, "source64": static.replace("'bfloat16'", "'float64'"), "dtype": "bfloat16",
           "options": {}, "data": "smooth", "seed": 0, "safe": True, "checks": ["sizes"],
           "all_outputs": True, "triage": False,
           "sized": {"symbolic": PROGRAM.format(size='SIZE = ta.size_var("n", min=16)', n="SIZE"),
                     "static": PROGRAM.format(size="", n=19), "at": 19}}
    assert checks.run_checks(job) == [{"check": "sizes", "status": "ok"}]
