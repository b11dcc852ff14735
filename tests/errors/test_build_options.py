"""Every build option is checked (type, range, relation to the target's vector
registers and to memory) with a clear error before any work -- ``microkernel=True,
tile=(10**6, 16, 10**6, 10**6)`` used to hang in LLVM, and ``(1024, 16, 1, 1024)`` took 14 s.
Each bad input has its own test; the error names the option and what it got."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


@pytest.fixture
def matmul():
    A = ta.placeholder((40, 48), "float32", "A")
    B = ta.placeholder((48, 64), "float32", "B")
    k = ta.reduce_axis((0, 48), "k")
    return A, B, ta.compute((40, 64), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k), name="C")


def test_huge_micro_kernel_tile_is_refused(matmul):
    A, B, C = matmul
    with pytest.raises(ValueError, match=r"tile MR must be an int from 1 to 256, got 1000000"):
        ta.build([C], [A, B], microkernel=True, tile=(10**6, 16, 10**6, 10**6))


@pytest.mark.parametrize("tile", [(128, 32, 1, 128), (256, 16, 1, 1024)])
def test_register_tile_larger_than_the_register_file_is_refused(matmul, tile):
    A, B, C = matmul
    with pytest.raises(ValueError, match=rf"MR x NR = {tile[0]} x {tile[1]} float32 accumulator tile "
                                         r".* exceeds twice this target's vector registers"):
        ta.build([C], [A, B], microkernel=True, tile=tile)


def test_packed_blocks_over_the_memory_limit_are_refused():
    A = ta.placeholder((4096, 16384), "float64", "A")
    B = ta.placeholder((16384, 4096), "float64", "B")
    k = ta.reduce_axis((0, 16384), "k")
    C = ta.compute((4096, 4096), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k), name="C")
    with pytest.raises(ValueError, match=r"packed blocks of A and B need \d+ MiB per call"):
        ta.lower([C], [A, B], microkernel=True, tile=(8, 16, 1 << 20, 1 << 20))


def test_large_cache_blocks_are_clamped_to_the_product(matmul, rng):
    """KC and MC beyond the product's own K and M change nothing: clamped, and right."""
    A, B, C = matmul
    kern = ta.build([C], [A, B], microkernel=True, tile=(8, 32, 1 << 20, 1 << 20))
    assert "KC=48 MC=40" in str(kern.lowered)
    a = rng.standard_normal((40, 48)).astype(np.float32)
    b = rng.standard_normal((48, 64)).astype(np.float32)
    np.testing.assert_allclose(kern(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_a_register_tile_alone_takes_a_default_cache_block_it_divides(rng):
    """``tile=(MR, NR)``: the default MC is made of whole MR-high panels (it was refused when
    the target's default, a multiple of its own MR, was not one of the user's)."""
    A = ta.placeholder((300, 256), "float32", "A")
    B = ta.placeholder((256, 128), "float32", "B")
    k = ta.reduce_axis((0, 256), "k")
    C = ta.compute((300, 128), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k), name="C")
    a = rng.standard_normal((300, 256)).astype(np.float32)
    b = rng.standard_normal((256, 128)).astype(np.float32)
    for mr in (5, 6, 7):
        kern = ta.build([C], [A, B], microkernel=True, tile=(mr, 16), target="llvm -mcpu=haswell")
        mc = int(str(kern.lowered).split(" MC=")[1].split(" ")[0].rstrip(")"))
        assert mc % mr == 0
        np.testing.assert_allclose(kern(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="MC a multiple of MR"):  # (a given MC is the user's)
        ta.build([C], [A, B], microkernel=True, tile=(6, 16, 64, 100))


@pytest.mark.parametrize("tile,what", [
    ((8.5, 32), r"tile MR must be an int from 1 to 256, got 8.5"),
    ((8, 32, 0), r"tile KC must be an int from 1 to 1048576, got 0"),
    ((8, -32), r"tile NR must be an int from 1 to 1024, got -32"),
    ((True, 32), r"tile MR must be an int from 1 to 256, got True"),
    ("8x32", r"tile must be a tuple \(MR, NR, KC, MC\) of positive ints, got '8x32'"),
    (8, r"tile must be a tuple \(MR, NR, KC, MC\) of positive ints, got 8"),
    ((8, 32, 16, 16, 4), r"tile must have 1 to 4 entries"),
    ((), r"tile must have 1 to 4 entries"),
])
def test_malformed_tile(matmul, tile, what):
    A, B, C = matmul
    with pytest.raises(ValueError, match=what):
        ta.build([C], [A, B], microkernel=True, tile=tile)


@pytest.mark.parametrize("option,value,what", [
    ("opt_level", True, r"opt_level must be 0, 1, 2 or 3, got True"),
    ("opt_level", 2.0, r"opt_level must be 0, 1, 2 or 3, got 2.0"),
    ("num_threads", True, r"num_threads must be a positive int or None, got True"),
    ("num_threads", 10**9, r"positive int or None, got 1000000000 \(at most 1024 threads\)"),
    ("vector_width", True, r"vector_width must be a power of two up to 64 or None, got True"),
    ("vector_width", 8.0, r"vector_width must be a power of two up to 64 or None, got 8.0"),
    ("vector_width", 12, r"vector_width must be a power of two up to 64 or None, got 12"),
])
def test_numeric_option_of_wrong_type_or_range(matmul, option, value, what):
    A, B, C = matmul
    with pytest.raises(ValueError, match=what):
        ta.build([C], [A, B], **{option: value})


def test_numpy_integers_are_accepted(matmul):
    A, B, C = matmul
    kern = ta.build([C], [A, B], num_threads=np.int64(2), opt_level=np.int32(1), tile=(np.int64(8), None))
    assert kern.num_threads == 2


def test_inline_option_that_is_not_iterable(matmul):
    A, B, C = matmul
    with pytest.raises(TypeError, match="option inline: expected a tensor or a list of tensors, got 5"):
        ta.build([C], [A, B], inline=5)


def test_kernel_name_that_is_not_a_string(matmul):
    A, B, C = matmul
    with pytest.raises(TypeError, match="name must be a non-empty string, got 7"):
        ta.build([C], [A, B], name=7)


@pytest.mark.parametrize("value", [0, -1, 2.0, "2", None, 10**6])
def test_setting_kernel_threads_to_a_bad_value(matmul, value):
    A, B, C = matmul
    kern = ta.build([C], [A, B])
    with pytest.raises(ValueError, match=r"num_threads must be a positive int, got .* \(at most 1024"):
        kern.num_threads = value
