"""Random well-formed programs: compiled kernels agree with ta.evaluate, and gradients too.

Every computed tensor of a random program is an output, so that every construct -- each
intermediate, reduction, lifted reduction and multi-output op -- is compiled and checked, with 1
and 2 threads, in both float dtypes and in strict mode.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import random_feed, random_program

import tensorad as ta

SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _check(outputs, placeholders, seed, **opts):
    feed = random_feed(placeholders, np.random.default_rng(seed))
    want = ta.evaluate(outputs, feed)
    kern = ta.build(outputs, placeholders, **opts)
    got = kern(*[feed[p] for p in placeholders])
    got = got if isinstance(got, tuple) else (got,)
    for t, g, w in zip(outputs, got, want):
        assert g.dtype == np.asarray(w).dtype, t.name
        if t.dtype in ta.FLOAT_DTYPES:
            # half: a float32 sum added in another order may round to the neighbouring value
            tol = {"float32": 2e-4, "float64": 1e-9, "float16": 4e-3, "bfloat16": 3e-2}[t.dtype]
            np.testing.assert_allclose(g.astype(np.float64), np.asarray(w, np.float64), rtol=tol, atol=tol,
                                       err_msg=t.name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=t.name)
    return kern


@pytest.mark.slow
@settings(max_examples=60, **SETTINGS)
@given(random_program(dtype="float64"), st.sampled_from([1, 2]), st.booleans())
def test_random_programs_float64(program, threads, fastmath):
    _check(program.outputs, program.placeholders, 0, num_threads=threads, fastmath=fastmath,
           parallel_min_work=0)


@settings(max_examples=80, **SETTINGS)
@given(random_program(dtype="float32"))
def test_random_programs_float32(program):
    _check(program.outputs, program.placeholders, 1)


@settings(max_examples=30, **SETTINGS)
@given(random_program(dtype="bfloat16") | random_program(dtype="float16"),
       st.sampled_from(["llvm", "llvm -mattr=-f16c"]))
def test_random_programs_half(program, target):
    """Programs storing every tensor in a half type (computing in float32) on the F16C and
    the integer conversion paths."""
    _check(program.outputs, program.placeholders, 3, target=target)


@settings(max_examples=80, **SETTINGS)
@given(random_program(dtype="float64", max_inputs=2, max_computes=3, depth=2))
def test_random_gradients(program):
    inputs = [p for p in program.placeholders if p.dtype in ta.FLOAT_DTYPES]
    y = program.output
    h = ta.placeholder(y.shape, "float64", name="H")
    grads = ta.JacobianRecursive(y, inputs, h)
    _check(list(grads), list(program.placeholders) + [h], 2)
