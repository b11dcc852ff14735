"""Programs drawn with ``tune``: ``tune`` measures only points heavy enough to time
(``tensorad.codegen.tune.MIN_CYCLES``), so the fuzzer's own builds pin a
seeded random candidate at every point offered several -- the alternatives stay covered."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import tensorad as ta  # noqa: E402
from fuzz import checks  # noqa: E402

PROGRAM = """import tensorad as ta
DT = 'float32'
x0 = ta.placeholder((6, 16), DT, name='x0')
r0 = ta.reduce_axis((0, 6), name='r0')
t0 = ta.compute((16,), lambda j: ta.sum(x0[r0, j], axis=r0), name='t0')
INPUTS = [x0]
TENSORS = [t0]
OUT = t0
"""


def _case(options: dict, seed: int) -> checks.Case:
    return checks.Case({"source": PROGRAM, "source64": PROGRAM, "dtype": "float32", "options": options,
                        "data": "smooth", "seed": seed, "safe": True, "checks": [], "all_outputs": True})


def test_tune_programs_pin_a_random_offered_candidate_and_stay_right(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))
    first = _case({}, 0)
    (point, labels, _), = ta.lower(first.outputs, first.inputs, variants=True).offered
    pinned = set()
    for seed in range(12):
        case = _case({"tune": True}, seed)
        kernel = case.build(case.outputs, case.inputs)
        (got_point, label), = kernel.lowered.options.choices
        assert got_point == point and label in labels
        pinned.add(label)
        x = case.args()[0]
        np.testing.assert_allclose(kernel(x), x.astype("float64").sum(0), rtol=1e-5, atol=1e-5)
    assert pinned == set(labels)  # (every candidate drawn over a dozen seeds)
    assert first.build(first.outputs, first.inputs).lowered.options.choices == ()
