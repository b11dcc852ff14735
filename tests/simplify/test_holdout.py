"""The holdout of operators written as a user writes them (``workloads.holdout_workloads``):
variance over a middle axis, L2 normalization, cosine similarity, grouped and
depthwise-separable convolutions, a ceil-mode average pool, GLU, RMSNorm, swish, a batched
product with a broadcast weight, an embedding bag, triplet and Huber losses, a causal 1-D
convolution, a pixel shuffle, log-sum-exp over a middle axis, a 1-D convolution of stride 3 and
dilation 2, a step of forward substitution, a banded matrix-vector product, Euclidean distances,
attention with an additive mask given as data, an einsum with a bias on its summed index and a
ReLU after a max.  Each gradient's work, counted term by term on a pinned
target (``fuzz.cheap.plain_work``: a convolution's unrolled taps count one each, as the hand
formulas do), is at most 1.25x an expert's backward stated beside the workload, and its values
match float64 central differences."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import simplify_workloads as W

import tensorad as ta
from tensorad.ir import placeholders

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import plain_work  # noqa: E402

TARGET = "llvm -mcpu=skylake-avx512"
HOLDOUT = {w.name: w for w in W.holdout_workloads()}


@pytest.mark.slow  # (the work bar: make test; make test-fast checks the values)
@pytest.mark.parametrize("name", sorted(HOLDOUT))
def test_holdout_gradient_is_within_a_quarter_of_the_hand_written_work(name):
    wl = HOLDOUT[name]
    H = ta.placeholder(wl.output.shape, name="H")
    grads = list(ta.JacobianRecursive(wl.output, wl.inputs, H))
    work = plain_work(grads, placeholders(grads), target=TARGET)
    assert work <= 1.25 * wl.hand_work, f"{name}: work {work} > 1.25 x {wl.hand_work} ({wl.formula})"


@pytest.mark.parametrize("name", sorted(HOLDOUT))
def test_holdout_gradient_matches_finite_differences(name):
    wl = HOLDOUT[name]
    rng = np.random.default_rng(0)  # integer inputs (the bag's indices) in range
    feed = {t: rng.integers(0, 10, t.shape).astype(np.int32)
            for t in placeholders([wl.output]) if t.dtype == "int32"}
    assert ta.gradcheck(wl.output, wl.inputs, feed=feed)
