"""Seeing what the compiler does: ``TENSORAD_LOG=passes`` / ``ta.config(log="passes")`` report
each stage's time on the logger "tensorad", ``TENSORAD_DUMP`` / ``ta.config(dump=DIR)`` write
each stage's text, ``tensorad show --timings`` prints the stage times."""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
import textwrap
import time

import pytest

import tensorad as ta
from tensorad import cli

STAGES = ("define", "optimize", "differentiate", "lower", "cache miss", "llvm", "jit")
_fresh = itertools.count()


def _program():
    """A small layer whose constant makes its kernel new to this process and to the disk cache."""
    c = float(os.getpid()) + time.time() % 1000 + next(_fresh)
    x = ta.placeholder((3, 5), "float64", name="X")
    w = ta.placeholder((4, 5), "float64", name="W")
    k = ta.reduce_axis((0, 5), name="k")
    y = ta.compute((3, 4), lambda i, j: ta.tanh(ta.sum(x[i, k] * w[j, k] * c, axis=k)), name="layer")
    return x, w, y


def test_config_logs_every_stage_to_the_tensorad_logger(caplog):
    caplog.set_level(logging.INFO, logger="tensorad")
    with ta.config(log="passes"):
        x, w, y = _program()
        (gw,) = ta.JacobianRecursive(ta.topi.sum(y), [w])
        ta.build([gw], [x, w], cache=False)
        ta.build([gw], [x, w], cache=False)
    messages = [r.getMessage() for r in caplog.records if r.name == "tensorad"]
    for name in STAGES:
        assert any(m.startswith(name) for m in messages), (name, messages)
    assert any(m.startswith("cache hit") and "(memory)" in m for m in messages)
    assert all(" ms " in m for m in messages)
    caplog.clear()
    ta.build([gw], [x, w], cache=False)  # outside the block (and no TENSORAD_LOG): silent
    assert not [r for r in caplog.records if r.name == "tensorad"]


def test_config_dump_writes_each_stage_text(tmp_path):
    with ta.config(dump=tmp_path):
        x, w, y = _program()
        (gw,) = ta.JacobianRecursive(ta.topi.sum(y), [w])
        ta.build([gw], [x, w], cache=False)
    by_suffix = {p.name.split(".", 1)[1]: p.read_text() for p in tmp_path.iterdir()
                 if not p.name.startswith("gradient")}
    assert set(by_suffix) == {"tensors.txt", "loops.txt", "ll", "opt.ll", "s"}, sorted(by_suffix)
    assert "tensor W.grad[0]" in by_suffix["tensors.txt"]
    assert by_suffix["loops.txt"].startswith("kernel kernel(")
    assert "define void" in by_suffix["ll"] and "define void" in by_suffix["opt.ll"]
    assert "ret" in by_suffix["s"]
    grads = [p for p in tmp_path.iterdir() if p.name.startswith("gradient-W.grad")]
    assert len(grads) == 1 and "tensor W.grad[0]" in grads[0].read_text()


@pytest.mark.slow
def test_environment_switches_logging_and_dumping_on(tmp_path):
    script = textwrap.dedent("""
        import tensorad as ta
        x = ta.placeholder((4,), "float64", name="X")
        y = ta.compute((4,), lambda i: ta.exp(x[i]) * 3.25, name="Y")
        ta.build([y], [x], cache=False)
    """)
    env = dict(os.environ, TENSORAD_LOG="passes", TENSORAD_DUMP=str(tmp_path / "dump"))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for name in ("define", "lower", "llvm", "jit"):
        assert f"tensorad: {name}" in done.stderr, done.stderr
    assert any(p.suffix == ".s" for p in (tmp_path / "dump").iterdir())


def test_config_overrides_the_environment_and_checks_its_arguments(monkeypatch, caplog):
    monkeypatch.setenv("TENSORAD_LOG", "passes")
    caplog.set_level(logging.INFO, logger="tensorad")
    with ta.config(log=None):
        _program()
    assert not [r for r in caplog.records if r.name == "tensorad"]
    with pytest.raises(ValueError, match="unknown log kind.*loud"):
        with ta.config(log="loud"):
            pass
    with pytest.raises(TypeError, match="dump must be a folder path"):
        with ta.config(dump=3):
            pass
    monkeypatch.setenv("TENSORAD_LOG", "everything")
    with pytest.raises(ValueError, match="TENSORAD_LOG: unknown log kind"):
        _program()


def test_show_timings_prints_every_stage(tmp_path, capsys):
    path = tmp_path / "layer.py"
    path.write_text(textwrap.dedent(f"""
        import tensorad as ta
        X = ta.placeholder((4, 6), name="X")
        W = ta.placeholder((5, 6), name="W")
        Y = ta.topi.nn.relu(ta.topi.nn.dense(X, W) * {time.time() % 1000!r})
    """))
    assert cli.main(["show", f"{path}:Y", "--timings", "--no-lower"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("# stage times (ms)"):]
    for name in ("define", "optimize", "differentiate", "lower", "llvm", "jit"):
        assert f"\n{name} " in table, table
    assert "# totals" in table


def test_the_environment_is_parsed_once_not_at_every_stage(monkeypatch):
    # every op a long chain defines, differentiates and optimizes is a stage: parsing
    # TENSORAD_LOG/TENSORAD_DUMP again at each cost more than a small op's own stage
    from tensorad.ir import trace

    monkeypatch.setenv("TENSORAD_LOG", "passes")
    monkeypatch.delenv("TENSORAD_DUMP", raising=False)
    parsed = []
    real = trace._parse_log
    monkeypatch.setattr(trace, "_parse_log", lambda v, what: parsed.append(v) or real(v, what))
    clear = getattr(trace, "_from_environment", None)
    if clear is not None:
        clear.cache_clear()
    def double(P, k):
        return ta.compute((4,), lambda i: P[i] * 2.0, f"Y{k}")

    Y = ta.placeholder((4,), "float32", "X")
    for k in range(20):
        Y = double(Y, k)
    assert parsed == ["passes"]
    assert trace.current().log == {"passes"}
    monkeypatch.setenv("TENSORAD_LOG", "")  # (a changed environment is read again)
    assert trace.current().log == frozenset() and parsed == ["passes", ""]
    monkeypatch.setenv("TENSORAD_LOG", "nonsense")  # (a bad value raises every time)
    for _ in range(2):
        with pytest.raises(ValueError, match="nonsense"):
            trace.current()
    trace._from_environment.cache_clear()
