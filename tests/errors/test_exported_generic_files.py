"""A generic kernel (one compile for every count of rows) exports as one library per part and loads back
as a generic kernel that runs every admissible count; ``ta.load`` refuses, before running any code on
an array, a part whose description was changed, a part of another kernel, and a missing or truncated
part.  Oracles: a NumPy float64 formula written here, and the built kernel's bits."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from tensorad.codegen import LoadError

import tensorad as ta

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no system C compiler")


def _kernel(scale: float = 1.0):
    """``Y = tanh(scale * X W^T)`` over ``n`` rows and its column sums ``S`` (a sum over the rows)."""
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 6), name="X"), ta.placeholder((3, 6), name="W")
    k, r = ta.reduce_axis((0, 6), name="k"), ta.reduce_axis((0, n), name="r")
    Y = ta.compute((n, 3), lambda i, j: ta.tanh(scale * ta.sum(X[i, k] * W[j, k], axis=k)), name="Y")
    S = ta.compute((3,), lambda j: ta.sum(Y[r, j], axis=r), name="S")
    kernel = ta.build([Y, S], [X, W])
    assert kernel.generic
    return kernel


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The kernel, and the folder it was exported to once."""
    kernel, folder = _kernel(), tmp_path_factory.mktemp("generic")
    assert kernel.export(folder / "k.so") == str(folder / "k.so")
    return kernel, folder


def _copy(folder, tmp_path):
    shutil.copytree(folder, tmp_path / "k")
    return tmp_path / "k"


def test_a_generic_kernel_loads_back_and_runs_every_count(exported):
    kernel, folder = exported
    loaded = ta.load(folder / "k.so")
    assert loaded.generic and len(loaded.parts) == len(kernel.parts)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 6)).astype(np.float32)
    for rows in (1, 7, 64, 300):
        x = rng.standard_normal((rows, 6)).astype(np.float32)
        y, s = loaded(x, w)
        want = np.tanh(x.astype(np.float64) @ w.T.astype(np.float64))
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s, want.sum(0), rtol=1e-4, atol=1e-5)
        for got, built in zip((y, s), kernel(x, w), strict=True):
            np.testing.assert_array_equal(got, built)
    with pytest.raises(ValueError, match="size n = 0 is outside"):
        loaded(np.zeros((0, 6), np.float32), w)
    with pytest.raises(ValueError, match=r"input X: expected shape \[7, 6\], got \[7, 5\]"):
        loaded(np.zeros((7, 5), np.float32), w)


def test_a_changed_description_is_refused(exported, tmp_path):
    """Each part's library holds a digest of the description its ``.json`` gives: a part said to take a
    short block, or of other rows, would run past its arrays."""
    folder = _copy(exported[1], tmp_path)
    for part, change in (("k", lambda d: d["parts"][0].__setitem__(2, not d["parts"][0][2])),
                         ("k.rows8", lambda d: d["size"].__setitem__(3, 4))):
        side = folder / f"{part}.json"
        kept = side.read_text()
        meta = json.loads(kept)
        change(meta["generic"])
        side.write_text(json.dumps(meta))
        with pytest.raises(LoadError, match="changed or damaged after it was exported"):
            ta.load(folder / "k.so")
        side.write_text(kept)
    assert ta.load(folder / "k.so").generic


def test_a_part_of_another_kernel_is_refused(exported, tmp_path):
    """A part of another generic kernel over the same arrays, copied over one of this kernel's, is
    refused (the parts' description names their kernel's build keys)."""
    folder = _copy(exported[1], tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _kernel(2.0).export(other / "k.so")
    for suffix in (".so", ".h", ".json"):
        shutil.copy(other / f"k.rows8{suffix}", folder / f"k.rows8{suffix}")
    with pytest.raises(LoadError, match="is not a part of the generic kernel"):
        ta.load(folder / "k.so")


def test_a_missing_or_truncated_part_is_refused(exported, tmp_path):
    folder = _copy(exported[1], tmp_path)
    part = folder / "k.rows4.so"
    part.write_bytes(part.read_bytes()[:1000])
    with pytest.raises(LoadError, match="truncated, damaged or replaced"):
        ta.load(folder / "k.so")
    part.unlink()
    with pytest.raises(FileNotFoundError, match="no such library"):
        ta.load(folder / "k.so")
