# ruff: noqa: E501  (the fuzzer's program, as it drew it)
"""An HVP whose lowering made an op computed nowhere.

With ``codegen/passes/shared_windows.py``'s operands (without that pass the program built), a nest
reached the schedule with no statement at all -- an op computed at no point -- and
``schedule.fuse_short_outer`` and ``islast.build_loops`` indexed into the empty list
(``IndexError``, ``ValueError`` out of ``ta.build``, default options).  An op with no
statement now lowers to an empty nest.  Oracles: the fuzzer's checks (finite differences of
the gradient in float64, ``ta.evaluate``).
"""

import pytest

from fuzz.checks import run_checks
from fuzz.program import PRELUDE

SOURCE = "import tensorad as ta\n\nDT = 'float64'\n" + PRELUDE + '''
x0 = ta.placeholder((), DT, name='x0')
x1 = ta.placeholder((4, 9), DT, name='x1')
x2 = ta.placeholder((), DT, name='x2')
a0 = ta.placeholder((3, 17), DT, name='a0')
b0 = ta.placeholder((17, 24), DT, name='b0')
r0 = ta.reduce_axis((0, 17), name='r0')
c0 = ta.compute((3, 24), lambda i, j: ta.sum(a0[i, r0] * b0[r0, j], axis=[r0]) * 2.0 + a0[0, 0], name='c0')
U0 = ta.generalized_matmul(c0, ta.topi.transpose(c0, (1, 0)), 1)
t0 = ta.compute((), lambda : ta.cos(U0[0, 0]), name='t0')
a1 = ta.placeholder((1, 18), DT, name='a1')
b1 = ta.placeholder((18, 8), DT, name='b1')
r1 = ta.reduce_axis((1, 18), name='r1')
c1 = ta.compute((1, 8), lambda i, j: ta.tanh(ta.sum(a1[i, r1] * b1[r1, j] * 0.5, axis=[r1])), name='c1')
t1 = ta.compute((7, 7), lambda i0, i1: ta.if_then_else((i1 + 3 >= 0) & (i1 + 3 < 17), b0[i1 + 3, i1], 0.0), name='t1')
U2 = ta.topi.erf(x0)
t2 = ta.compute((), lambda : -(ta.select(b0[14, 19] <= c1[0, 0], b0[14, 19], ta.const(2.0, DT))), name='t2')
L3 = ta.topi.nn.gelu(x0)
a3 = ta.placeholder((3, 3), DT, name='a3')
b3 = ta.placeholder((3, 17), DT, name='b3')
r2 = ta.reduce_axis((0, 3), name='r2')
c3 = ta.compute((3, 17), lambda i, j: ta.maximum(ta.max(a3[i, r2] * b3[r2, j], axis=[r2]), 0.0), name='c3')
r3 = ta.reduce_axis((-1, 3), name='r3')
t3 = ta.compute((3,), lambda i0: MYPROD((c0[2 - r3 % 3, (i0 + 3) % 24] * (ta.const(0.5, DT) - U0[0, (r3 + 1) % 3])), axis=r3, where=(r3 + i0) % 3 == 1), name='t3')
INPUTS = [x0, x1, x2, a0, b0, a1, b1, a3, b3]
TENSORS = [c0, U0, t0, c1, t1, U2, t2, L3, c3, t3]
OUT = t3
'''


@pytest.mark.slow
def test_an_operand_computed_nowhere_builds_and_its_hvp_is_right():
    job = dict(source=SOURCE, source64=SOURCE, dtype="float64",
               options={"opt_level": 2, "target": "llvm -mattr=-avx512f"}, data="smooth", seed=535482,
               safe=True, checks=["hvp", "split"], all_outputs=False, calling="plain", torch=None)
    results = list(run_checks(job))
    assert [r["status"] for r in results] == ["ok", "ok"], results
