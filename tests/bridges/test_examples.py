"""The examples a user copies run, and train exactly like the pure-framework models.

Each example is run with a small step count; its tensorad model's losses are compared step by
step with the same model written with the framework's own operators (float32 tolerance).  The
DDP example runs as a user would run it (its own 2 processes) and checks itself: it exits with
an error unless the data-parallel parameters equal the single-process ones.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_losses(runs: dict, peer: str, steps: int) -> None:
    got, want = np.array(runs["tensorad"]), np.array(runs[peer])
    assert len(got) == steps and np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got[-1] < got[0]  # it learns


def test_torch_cnn_trains_like_pytorch(capsys):
    pytest.importorskip("torch", reason="an optional extra; make test requires it")
    runs = _load("torch_cnn").main(["--steps", "4", "--compare"])
    _check_losses(runs, "torch", 4)
    assert "step   3  tensorad loss" in capsys.readouterr().out


def test_torch_transformer_block_trains_like_pytorch(capsys):
    pytest.importorskip("torch", reason="an optional extra; make test requires it")
    runs = _load("torch_transformer").main(["--steps", "6", "--compare"])
    _check_losses(runs, "torch", 6)
    assert "step   5  tensorad loss" in capsys.readouterr().out


def test_jax_cnn_trains_like_jax(capsys):
    pytest.importorskip("jax", reason="an optional extra; make test requires it")
    runs = _load("jax_cnn").main(["--steps", "4", "--compare"])
    _check_losses(runs, "jax", 4)
    assert "step   3  tensorad loss" in capsys.readouterr().out


def _run_to_the_end(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``argv`` run in its own process group.  Past ``timeout`` every process of the group (the
    example, its spawned workers, their children) is sent ``SIGABRT`` -- Python's fault handler
    (on here) prints each one's threads -- and then killed; the failure shows what each was
    waiting for, and no process outlives the test."""
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGABRT)
            try:
                out, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                out, err = "", ""
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"{argv[1:]} ran past {timeout} s; the threads of its processes:\n{out}{err}")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.slow
def test_ddp_reaches_the_single_process_parameters():
    pytest.importorskip("torch.distributed", reason="an optional extra; make test requires it")
    done = _run_to_the_end([sys.executable, str(EXAMPLES / "ddp_cnn.py"), "--steps", "2"], 240)
    assert done.returncode == 0, done.stdout + done.stderr
    diff = float(re.search(r"max parameter difference (\S+)", done.stdout).group(1))
    assert diff <= 2e-5
    losses = re.findall(r"ddp loss (\S+)  single-process loss (\S+)", done.stdout)
    assert len(losses) == 2
    np.testing.assert_allclose(*np.array(losses, float).T, rtol=1e-5)
