"""Kernels you can ship: ``kernel.export`` (shared library + C header), ``ta.load``, pickling.

The oracle is ``ta.evaluate``; the C test compiles a program against the header with the
system's C compiler, so it runs without Python in the loop."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tensorad.codegen import KernelArgumentError

import tensorad as ta

rng = np.random.default_rng(7)
CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no system C compiler")


def _mlp_backward():
    """A dense + relu + softmax layer's gradients: temporaries, a matrix product, two outputs."""
    x = ta.placeholder((8, 12), name="X")
    w = ta.placeholder((6, 12), name="W")
    y = ta.topi.nn.softmax(ta.topi.nn.relu(ta.topi.nn.dense(x, w)))
    h = ta.placeholder(y.shape, name="H")
    dx, dw = ta.JacobianRecursive(y, [x, w], h)
    feed = {x: rng.standard_normal(x.shape).astype("float32"),
            w: rng.standard_normal(w.shape).astype("float32"),
            h: rng.standard_normal(h.shape).astype("float32")}
    return [dx, dw], feed


@needs_cc
def test_export_then_load_runs_and_checks_like_the_built_kernel(tmp_path):
    outs, feed = _mlp_backward()
    kernel = ta.build(outs, list(feed), num_threads=2)
    path = kernel.export(tmp_path / "mlp_grad.so")
    assert {p.name for p in tmp_path.iterdir()} == {"mlp_grad.so", "mlp_grad.h", "mlp_grad.json"}
    loaded = ta.load(path)
    want = ta.evaluate(outs, feed)
    for got, ref in zip(loaded(*feed.values()), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    loaded.num_threads = 1
    for got, ref in zip(loaded(*feed.values()), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    args = list(feed.values())
    with pytest.raises(KernelArgumentError, match="input W: expected shape"):
        loaded(args[0], args[0], args[2])
    with pytest.raises(KernelArgumentError, match="input X: expected dtype float32"):
        loaded(args[0].astype("float64"), *args[1:])
    with pytest.raises(KernelArgumentError, match="takes 3 input arrays"):
        loaded(*args[:2])


C_MAIN = textwrap.dedent("""
    #include <stdio.h>
    #include <stdlib.h>
    #include "mlp_grad.h"
    static float *read_all(const char *name, long n) {
        float *p = malloc(n * sizeof(float));
        FILE *f = fopen(name, "rb");
        if (!f || fread(p, sizeof(float), n, f) != (size_t)n) { perror(name); exit(1); }
        fclose(f);
        return p;
    }
    int main(void) {
        float *x = read_all("X.bin", 8 * 12), *w = read_all("W.bin", 6 * 12), *h = read_all("H.bin", 8 * 6);
        float dx[8 * 12], dw[6 * 12];
        mlp_grad(x, w, h, dx, dw, 2);
        FILE *f = fopen("out.bin", "wb");
        fwrite(dx, sizeof(float), 8 * 12, f);
        fwrite(dw, sizeof(float), 6 * 12, f);
        fclose(f);
        return 0;
    }
""")


def _run_c_main(tmp_path, outs, feed):
    """Compile ``C_MAIN`` against ``mlp_grad.so`` in ``tmp_path``, run it, check its output."""
    for t, a in feed.items():
        a.tofile(tmp_path / f"{t.name}.bin")
    (tmp_path / "main.c").write_text(C_MAIN)
    subprocess.run([CC, "main.c", "-o", "main", f"-L{tmp_path}", "-l:mlp_grad.so", f"-Wl,-rpath,{tmp_path}"],
                   cwd=tmp_path, check=True, capture_output=True)
    subprocess.run(["./main"], cwd=tmp_path, check=True, capture_output=True)
    got = np.fromfile(tmp_path / "out.bin", np.float32)
    want = ta.evaluate(outs, feed)
    np.testing.assert_allclose(got[:96].reshape(8, 12), want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[96:].reshape(6, 12), want[1], rtol=1e-4, atol=1e-5)


@needs_cc
def test_a_c_program_calls_the_exported_kernel(tmp_path):
    outs, feed = _mlp_backward()
    ta.build(outs, list(feed)).export(tmp_path / "mlp_grad.so")
    header = (tmp_path / "mlp_grad.h").read_text()
    assert "void mlp_grad(const float *X, const float *W, const float *H, float *X_grad, " \
           "float *W_grad, int num_threads);" in header
    _run_c_main(tmp_path, outs, feed)



@needs_cc
@pytest.mark.parametrize("line", [64, 128])
def test_the_c_wrapper_places_temporaries_on_the_targets_cache_line(tmp_path, monkeypatch, line):
    # (the kernel's temporaries start on its target's cache line, as Kernel places them; the
    # wrapper hard-coded 64 bytes)
    import dataclasses

    from tensorad.codegen.runtime import export
    from tensorad.codegen.target import host_target

    outs, feed = _mlp_backward()
    kernel = ta.build(outs, list(feed))
    assert kernel.signature.temps  # (temporaries to place)
    target = kernel.compiled.target or host_target()
    monkeypatch.setattr(kernel.compiled, "target", dataclasses.replace(target, line=line))
    written = []
    real = export._wrapper
    monkeypatch.setattr(export, "_wrapper", lambda *a: written.append(real(*a)) or written[-1])
    kernel.export(tmp_path / "mlp_grad.so")
    allocs = [ln for ln in written[0].splitlines() if "aligned_alloc" in ln]
    assert len(allocs) == len(kernel.signature.temps)
    for ln in allocs:
        align, size = map(int, ln.split("aligned_alloc(")[1].rstrip(");").split(","))
        assert align == line and size % line == 0, ln
    _run_c_main(tmp_path, outs, feed)

PICKLED = textwrap.dedent("""
    import pickle, sys
    import numpy as np
    kernel = pickle.load(open(sys.argv[1], "rb"))
    args = [np.load(a) for a in sys.argv[2:]]
    out = kernel(*args)
    np.save(sys.argv[1] + ".out.npy", out)
    print(repr(kernel))
""")


def test_kernels_pickle_and_run_in_another_process(tmp_path):
    x = ta.placeholder((5, 7), "float64", name="X")
    k = ta.reduce_axis((0, 7), name="k")
    y = ta.compute((5,), lambda i: ta.log(ta.sum(ta.exp(x[i, k]), axis=k)), name="lse")
    kernel = ta.build([y], [x])
    data = rng.standard_normal(x.shape)
    again = pickle.loads(pickle.dumps(kernel))  # this process
    np.testing.assert_allclose(again(data), ta.evaluate([y], {x: data})[0], rtol=1e-12)
    (tmp_path / "kernel.pkl").write_bytes(pickle.dumps(kernel))
    np.save(tmp_path / "x.npy", data)
    (tmp_path / "run.py").write_text(PICKLED)
    done = subprocess.run([sys.executable, "run.py", "kernel.pkl", "x.npy"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "lse: float64[5]" in done.stdout
    np.testing.assert_allclose(np.load(tmp_path / "kernel.pkl.out.npy"), ta.evaluate([y], {x: data})[0],
                               rtol=1e-12)


def test_export_and_load_errors(tmp_path):
    x = ta.placeholder((3,), name="X")
    kernel = ta.build([ta.compute((3,), lambda i: x[i] * 2.0, name="Y")], [x])
    with pytest.raises(ValueError, match="must end in .so"):
        kernel.export(tmp_path / "y.dll")
    with pytest.raises(FileNotFoundError, match="no such library"):
        ta.load(tmp_path / "missing.so")
    (tmp_path / "lonely.so").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="lonely.json"):
        ta.load(tmp_path / "lonely.so")
