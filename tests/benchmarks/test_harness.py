"""Smoke test of the benchmark harness (``python -m benchmarks``) on tiny shapes.

Runs the real command line in subprocesses with PyTorch and JAX hidden (stub packages that
raise ``ModuleNotFoundError`` first on ``PYTHONPATH``), so it needs neither and proves that a
missing peer is reported as "not installed" instead of crashing the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import tensorad as ta

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import timing  # noqa: E402
from benchmarks.check import compare  # noqa: E402

STUB = "raise ModuleNotFoundError(\"No module named '{0}'\", name='{0}')\n"
WORKLOADS = "dense,max_pool"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    for mod in ("torch", "jax"):
        (tmp / "stubs" / mod).mkdir(parents=True)
        (tmp / "stubs" / mod / "__init__.py").write_text(STUB.format(mod))
    env = dict(os.environ, PYTHONPATH=str(tmp / "stubs"))
    out = tmp / "result.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--tiny", "--threads", "1",
                           "--workloads", WORKLOADS, "--json", str(out), "--no-plot"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return proc, json.loads(out.read_text()) if out.exists() else None, out


def test_runs_and_reports_missing_peers(tiny_run):
    proc, res, _ = tiny_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert res["options"]["mode"] == "tiny" and [w["name"] for w in res["workloads"]] == WORKLOADS.split(",")
    systems = res["runs"][0]["systems"]
    assert systems["torch"]["status"] == "not installed"
    assert systems["jax"]["status"] == "not installed"
    assert "not installed" in proc.stdout and "seed 2018" in proc.stdout
    assert res["machine"]["versions"]["tensorad"] == ta.__version__
    assert res["load"]["start"]["loadavg"] is not None
    assert all(r["foreign_cpus"] >= 0 for r in systems.values())   # other processes' load
    assert "[" in proc.stderr and "done" in proc.stderr  # the progress bar


def test_numpy_peer_is_checked_and_timed(tiny_run):
    _, res, _ = tiny_run
    numpy = res["runs"][0]["systems"]["numpy"]
    for name in WORKLOADS.split(","):
        for phase in ("forward", "backward"):
            e = numpy["workloads"][name][phase]
            assert e["status"] == "ok" and e["check"]["ok"], e
            t = e["timing"]
            assert t["runs"] >= 3 and 0 < t["q1_ms"] <= t["median_ms"] <= t["q3_ms"]
    rows = numpy["sweeps"]
    assert rows["gemm 16x16x16"]["rate"] > 0 and rows["copy 4096"]["status"] == "ok"


def test_tensorad_entries_are_timed_or_explained(tiny_run):
    _, res, _ = tiny_run
    for system in ("tensorad", "tensorad-hand"):
        r = res["runs"][0]["systems"][system]
        entries = [e for w in r["workloads"].values() for e in w.values()] + list(r["sweeps"].values())
        if r["status"] != "ok":
            assert r["status"].startswith(("unavailable", "not installed")), r["status"]
            continue
        for e in entries:
            if e["status"] == "ok":
                assert e["check"]["ok"] and e["timing"]["runs"] >= 3
            else:   # never silently missing: a status and a reason
                assert e["status"] in ("unavailable", "error", "mismatch", "skipped") and \
                    (e.get("reason") or e.get("check")), e


def test_report_prints_markdown(tiny_run):
    _, _, path = tiny_run
    proc = subprocess.run([sys.executable, "-m", "benchmarks.report", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("| workload | tensorad |") for line in lines)
    assert sum(line.startswith("| max_pool |") for line in lines) == 1


def test_timing_takes_median_and_iqr_of_several_runs():
    calls = []
    t = timing.measure(lambda: calls.append(1), target_s=0.01, min_runs=3)
    assert t.runs >= 3 and t.batch > 1 and len(calls) >= t.runs * t.batch
    assert t.q1_ms <= t.median_ms <= t.q3_ms and t.iqr_ms >= 0
    assert timing.quartiles([4.0, 1.0, 3.0, 2.0, 5.0]) == (2.0, 3.0, 4.0)
    assert timing.plan(0.1, 0.3, 5) == (5, 1)        # the minimum count, no batching
    assert timing.plan(0.5, 0.3, 5) == (3, 1)        # slow calls: 3 samples
    assert timing.plan(1e-5, 0.3, 5) == (200, 100)   # fast calls: batched, capped
    with pytest.raises(ValueError, match="at least 3"):
        timing.measure(lambda: None, min_runs=1)


def test_check_flags_mismatches():
    import numpy as np

    ref = np.arange(6.0).reshape(2, 3)
    assert compare([ref.astype(np.float32)], [ref])["ok"]
    bad = compare([ref + 0.1], [ref])
    assert not bad["ok"] and "max rel err" in bad["detail"]
    assert "shape" in compare([ref.T], [ref])["detail"]


def test_homebrew_softmax_check_flags_a_gradient_that_flushes_one_over_s_squared():
    """The homebrew softmax's inputs take rows' sums of exps past 9.2e18, where ``1 / S^2`` is a float32
    subnormal.  A gradient that forms it (JAX's division rule ``-g x S^-2``) and flushes it to
    zero (XLA's CPU code does) loses ``-sum(H E) / S^2`` on those rows; one that divides twice,
    ``(sum(H E) / S) / S`` (PyTorch's rule), keeps it.  The float64 oracle and the check tell them
    apart: a JAX MISMATCH on this row is JAX's float32 answer, not the benchmark's."""
    import numpy as np

    from benchmarks import data, workloads

    w = workloads.BY_NAME["softmax_homebrew"]
    arrays, _, head, grads = data.workload_data(w, tiny=False)
    x, wt = arrays["X"], arrays["W"]
    e = np.exp(x @ wt.T)
    s = e.sum(1, keepdims=True, dtype=np.float32)
    he = (head * e).sum(1, keepdims=True, dtype=np.float32)
    inv_sq = np.float32(1) / (s * s)
    assert (inv_sq < np.finfo(np.float32).tiny).any()

    def check(dy_ds):  # dL/dZ = E (H / S + dL/dS)
        dz = e * (head / s + dy_ds)
        return compare([dz @ wt, dz.T @ x], [grads["X"], grads["W"]])
    assert check(-(he / s) / s)["ok"]
    flushed = np.where(inv_sq < np.finfo(np.float32).tiny, np.float32(0), inv_sq)
    assert check(-he * flushed)["max_rel_err"] > 0.5


def test_compile_time_benchmark_reports_every_stage_cold_and_cached():
    from benchmarks import compile_time

    # small_cnn has integer inputs (class labels): placeholders of their own dtype; one workload
    # shows every stage (each workload runs the same cold and cached processes)
    res = compile_time.measure(["small_cnn"], repeat=1, tiny=True)
    assert set(res["workloads"]) == {"small_cnn"}
    names = ("define", "differentiate", "build_fwd", "build_bwd")
    for stages in res["workloads"].values():
        assert set(stages) == {"cold", "cached"}
        for times in stages.values():  # wall-clock and CPU seconds of each stage, the library's CPU
            # (and, where the builds lowered and compiled, their phases: see the second table)
            phases = {"cpu_lower", "cpu_ir", "cpu_llvm"}
            base = set(names) | {"cpu_" + n for n in names} | {"cpu_library"}
            assert base <= set(times) <= base | phases
            assert all(times[n] > 0 and times["cpu_" + n] >= 0 for n in names)
            builds = times["cpu_build_fwd"] + times["cpu_build_bwd"]
            assert 0 <= times["cpu_library"] <= builds
            assert all(times.get(p, 0.0) >= 0 for p in phases)
            assert times.get("cpu_lower", 0.0) + times.get("cpu_llvm", 0.0) <= builds
        assert {"cpu_lower", "cpu_llvm"} <= set(stages["cold"]) and not phases & set(stages["cached"])


LAYERS = "conv3x3s2_relu,max_pool3s2,log_softmax_nll"
MODELS = "small_cnn,resnet_block,mlp_classifier,lstm"


@pytest.mark.slow
def test_layers_and_models_suites_check_every_system_against_torch_float64(tmp_path):
    # One run of the harness (its references made once, each system in one worker process): the
    # layers, and whole models (the small CNN, the ResNet basic block, the MLP classifier, the
    # LSTM; forward = the loss, backward = every parameter's gradient), in tensorad, PyTorch and
    # JAX, against PyTorch's float64 autograd computed in a process of its own.  (The Transformer
    # block's tensorad program takes long to differentiate and build: its formulas are checked
    # without the harness below, and the block itself in tests/e2e/test_transformer_*.py.)
    pytest.importorskip("torch", reason="an optional extra; make test requires it")
    pytest.importorskip("jax", reason="an optional extra; make test requires it")
    out = tmp_path / "suites.json"
    names = f"{LAYERS},{MODELS}".split(",")
    cmd = [sys.executable, "-m", "benchmarks", "--tiny", "--threads", "1", "--suite", "layers,models",
           "--workloads", ",".join(names), "--systems", "tensorad,torch,jax", "--no-sweeps",
           "--budget", "960", "--json", str(out), "--no-plot"]  # (a loaded machine must skip no system)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["references"] == "ok" and sorted(w["name"] for w in res["workloads"]) == sorted(names)
    assert {w["suite"] for w in res["workloads"]} == {"layers", "models"}
    for name in names:
        for system in ("tensorad", "torch", "jax"):
            run = res["runs"][0]["systems"][system]
            assert name in run["workloads"], (name, system, run["status"], run.get("note"))
            for phase in ("forward", "backward"):
                e = run["workloads"][name][phase]
                assert e["check"]["ok"], (name, system, phase, e["check"])
    assert "suite layers: tensorad / fastest peer" in proc.stdout
    assert "suite models: tensorad / fastest peer" in proc.stdout


def test_the_models_suite_has_two_suites_of_budget():
    """torch.compile compiles every whole model on a cold cache: the models suite's quick budget
    leaves it the time to, where one suite's would skip the later models."""
    from benchmarks.__main__ import parse

    one = parse(["--quick", "--suite", "seed"]).budget
    assert parse(["--quick", "--suite", "models"]).budget == 2 * one
    assert parse(["--quick", "--suite", "seed,models"]).budget == 3 * one
    assert parse(["--quick", "--suite", "models", "--budget", "7"]).budget == 7


@pytest.mark.parametrize("name", ["transformer_block", "resnet_block", "mlp_classifier", "lstm"])
def test_model_formulas_agree(name):
    """A model of the models suite as tensorad (ta.topi, evaluated), PyTorch (float64 autograd,
    the suite's reference) and JAX write it: one loss."""
    pytest.importorskip("torch", reason="an optional extra; make test requires it")
    pytest.importorskip("jax", reason="an optional extra; make test requires it")
    import numpy as np

    from benchmarks import sys_jax, sys_tensorad, sys_torch, workloads

    w = workloads.BY_NAME[name]
    arrays = workloads.make_inputs(w, tiny=True)
    want, _, _ = sys_torch.autograd_reference(w, arrays, workloads.make_head)
    wide = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in arrays.items()}
    p = {k: ta.placeholder(v.shape, str(v.dtype), k) for k, v in wide.items()}
    loss = sys_tensorad.topi_forward(w.kind, p, w.params)
    got = ta.evaluate(loss, {p[k]: v for k, v in wide.items()})
    np.testing.assert_allclose(got, want, rtol=1e-12)
    sys_jax.setup(1)
    jax_loss = sys_jax._model(w.kind, w.params)(*arrays.values())
    np.testing.assert_allclose(float(jax_loss), want, rtol=1e-5)


def test_convs_suite_formulas_agree():
    """Every layer of the convs suite as tensorad (ta.topi, evaluated), PyTorch (float64, the
    suite's reference) and JAX write it, at the tiny shapes: one output (grouped, depthwise,
    dilated, strided, transposed, biased)."""
    pytest.importorskip("torch", reason="an optional extra; make test requires it")
    pytest.importorskip("jax", reason="an optional extra; make test requires it")
    import numpy as np

    from benchmarks import sys_jax, sys_tensorad, sys_torch, workloads

    sys_jax.setup(1)
    convs = [w for w in workloads.WORKLOADS if w.suite == "convs"]
    assert {w.name for w in workloads.select([], ("layers",))}.isdisjoint(w.name for w in convs)
    for w in convs:
        arrays = workloads.make_inputs(w, tiny=True)
        want, _, _ = sys_torch.autograd_reference(w, arrays, workloads.make_head)
        wide = {k: v.astype(np.float64) for k, v in arrays.items()}
        p = {k: ta.placeholder(v.shape, "float64", k) for k, v in wide.items()}
        got = ta.evaluate(sys_tensorad.topi_forward(w.kind, p, w.params), {p[k]: v for k, v in wide.items()})
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=w.name)
        jax_y = sys_jax._model(w.kind, w.params)(*arrays.values())
        np.testing.assert_allclose(np.asarray(jax_y), want, rtol=1e-5, atol=1e-5, err_msg=w.name)


def test_a_models_forward_is_the_one_a_training_step_runs():
    """The models suite times the forward a step runs: tensorad's ``ta.function`` forward, which also
    writes the residuals its backward reads, and PyTorch's with gradients enabled (recording what its
    backward reads); a layer's forward stays the plain kernel.  Values against PyTorch's float64."""
    pytest.importorskip("torch", reason="an optional extra; make test requires it")
    import numpy as np

    from benchmarks import sys_tensorad, sys_torch, workloads

    sys_tensorad.setup(1)
    sys_torch.setup(1)
    w = workloads.BY_NAME["mlp_classifier"]
    arrays = workloads.make_inputs(w, tiny=True)
    want, _, _ = sys_torch.autograd_reference(w, arrays, workloads.make_head)
    phase = sys_tensorad.forward(w, arrays, "autodiff")
    assert phase.info["saved"]  # the residual-keeping forward
    np.testing.assert_allclose(phase.outputs(phase.fn())[0], want, rtol=1e-4)
    loss = sys_torch.forward(w, arrays).fn()
    assert loss.grad_fn is not None
    np.testing.assert_allclose(loss.detach().numpy(), want, rtol=1e-4)
    layer = workloads.BY_NAME["dense"]
    dense = workloads.make_inputs(layer, tiny=True)
    assert "saved" not in sys_tensorad.forward(layer, dense, "autodiff").info
    assert sys_torch.forward(layer, dense).fn().grad_fn is None
