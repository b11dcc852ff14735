"""Kernels take any object with ``__dlpack__`` as an input or as ``out=``, without copying.

The oracle is NumPy arithmetic on the same values; "no copy" is shown by data pointers: the
array a kernel reads (``as_array``) has the address of the object given, and an output object
passed as ``out=`` is the object returned, written in place.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.runtime.kernel import KernelArgumentError, as_array

import tensorad as ta


class Exporter:
    """A foreign array type that only speaks DLPack (as a framework's tensor would)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.fixture(scope="module")
def axpy():
    X, Y = ta.placeholder((3, 5), "float32", "X"), ta.placeholder((3, 5), "float32", "Y")
    return ta.build([ta.compute(X.shape, lambda i, j: 2.0 * X[i, j] + Y[i, j], "Z")], [X, Y])


def test_a_dlpack_input_is_viewed_not_copied(rng):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    assert as_array(Exporter(x), "input X").ctypes.data == x.ctypes.data


def test_dlpack_inputs_and_output(axpy, rng):
    x, y = (rng.standard_normal((3, 5)).astype(np.float32) for _ in range(2))
    z = np.zeros((3, 5), np.float32)
    out = Exporter(z)
    got = axpy(Exporter(x), Exporter(y), out=out)
    assert got is out
    np.testing.assert_allclose(z, 2 * x + y, rtol=1e-6)


def test_an_object_without_dlpack_is_refused(axpy):
    with pytest.raises(KernelArgumentError, match="input X: expected a numpy array .* got object"):
        axpy(object(), np.zeros((3, 5), np.float32))


def test_a_read_only_dlpack_output_is_refused(axpy):
    z = np.zeros((3, 5), np.float32)
    z.flags.writeable = False
    with pytest.raises(KernelArgumentError, match="out Z: must be a C-contiguous, aligned, writeable"):
        axpy(np.ones((3, 5), np.float32), np.ones((3, 5), np.float32), out=Exporter(z))


def test_torch_tensors_in_and_out_share_memory(axpy, rng):
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    x = torch.from_numpy(rng.standard_normal((3, 5)).astype(np.float32))
    y = torch.from_numpy(rng.standard_normal((3, 5)).astype(np.float32))
    assert as_array(x, "x").ctypes.data == x.data_ptr()
    z = torch.empty(3, 5)
    ptr = z.data_ptr()
    assert axpy(x, y, out=z) is z and z.data_ptr() == ptr
    np.testing.assert_allclose(z.numpy(), 2 * x.numpy() + y.numpy(), rtol=1e-6)
    # a transposed (non-contiguous) input is copied for reading, and still right
    xt = torch.from_numpy(np.ascontiguousarray(x.numpy().T)).T
    np.testing.assert_allclose(axpy(xt, y), 2 * x.numpy() + y.numpy(), rtol=1e-6)


def test_torch_tensor_that_requires_grad_is_a_clear_error(axpy):
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    x = torch.ones(3, 5, requires_grad=True)
    with pytest.raises(KernelArgumentError, match="input X: cannot view this Tensor .* detached"):
        axpy(x, np.ones((3, 5), np.float32))


def test_jax_arrays_as_inputs(axpy, rng):
    jnp = pytest.importorskip("jax.numpy", reason="an optional extra; make test requires it")
    x, y = (rng.standard_normal((3, 5)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(axpy(jnp.asarray(x), jnp.asarray(y)), 2 * x + y, rtol=1e-6)
