"""The optimizer's bar: each workload's optimized gradient does at most 1.25x the work of the
hand-written gradient formula (stated with each workload in ``workloads.py``), computes the
same values as the unoptimized gradient.  (Its speed is a benchmark: benchmarks/compile_time.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import simplify_workloads as W

import tensorad as ta
from tensorad.ir import placeholders, tensor_graph
from tensorad.lang import check_op_bounds

WORKLOADS = {w.name: w for w in W.all_workloads()}


@pytest.fixture(params=sorted(WORKLOADS))
def workload(request):
    return WORKLOADS[request.param]


def test_work_and_correctness(workload):
    # how long differentiating + optimizing takes is measured by python -m benchmarks.compile_time
    H = ta.placeholder(workload.output.shape, name="H")
    grads = ta.JacobianRecursive(workload.output, workload.inputs, H)
    work = ta.lower(grads, placeholders(grads)).work
    assert work <= 1.25 * workload.hand_work, (
        f"{workload.name}: work {work} > 1.25 x {workload.hand_work} ({workload.formula})")

    raw = ta.JacobianRecursive(workload.output, workload.inputs, H, optimize=False)
    rng = np.random.default_rng(1)
    feed = {x: rng.standard_normal(x.shape).astype(np.float32) for x in placeholders(raw)}
    for got, want in zip(ta.evaluate(grads, feed), ta.evaluate(raw, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    for t in tensor_graph(grads):
        if not t.is_placeholder:
            check_op_bounds(t.op)  # every read of every optimized tensor is in bounds


def test_forward_tensors_are_read_not_rewritten():
    wl = WORKLOADS["softmax"]
    H = ta.placeholder(wl.output.shape, name="H")
    grads = ta.JacobianRecursive(wl.output, wl.inputs, H)
    forward = {t.op for t in tensor_graph([wl.output]) if not t.is_placeholder}
    used = {t.op for t in tensor_graph(grads) if not t.is_placeholder}
    shared = {op.name: op for op in used if op.name in {f.name for f in forward}}
    assert shared and all(op in forward for op in shared.values())
