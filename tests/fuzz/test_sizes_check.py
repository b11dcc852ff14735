"""The fuzzer's ``sizes`` check: a random program with one extent made a size variable is, bound at
that extent, the program itself, and built once, at a larger size, the program written at that size:
the same bits forward and through its optimized and raw gradients, and the same work."""

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
    assert result["status"] == "fail" and "differ from the static program's" in result["message"]
