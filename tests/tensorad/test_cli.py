"""The `tensorad` command line: --version, show FILE.py:TENSOR, bench ARGS."""

from __future__ import annotations

import pathlib
import runpy
import subprocess
import sys
import textwrap

import pytest

import tensorad as ta
from tensorad import cli

SCRIPT = textwrap.dedent("""
    import tensorad as ta
    X = ta.placeholder((4, 3), name="X")
    W = ta.placeholder((2, 3), name="W")
    N = ta.placeholder((2,), "int32", name="N")
    Y = ta.topi.nn.dense(X, W)
    Z = ta.compute((2,), lambda i: ta.cast("float32", N[i]) * W[i, 0], name="Z")
    not_a_tensor = 3
    if __name__ == "__main__":
        MAIN_ONLY = Y
""")


@pytest.fixture
def script(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "model.py"
    path.write_text(SCRIPT)
    return path


@pytest.mark.slow
def test_version_from_the_installed_entry_point():
    exe = pathlib.Path(sys.executable).parent / "tensorad"
    assert exe.exists(), "the console script `tensorad` is not installed"
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == f"tensorad {ta.__version__}"


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "show" in capsys.readouterr().out


def test_show_prints_tensor_and_the_gradients_of_its_placeholders(script, capsys):
    assert cli.main(["show", f"{script}:Y", "--no-lower"]) == 0
    out = capsys.readouterr().out
    # the oracle: the same script, differentiated here with a head named as the CLI names it
    ns = runpy.run_path(str(script))
    Y, X, W = ns["Y"], ns["X"], ns["W"]
    head = ta.placeholder(Y.shape, name="head")
    dX, dW = ta.gradient(Y, [X, W], head)
    assert out.startswith("# tensor Y\n" + ta.PrintTensorRecursively(Y))
    assert "# gradient of Y with respect to X (head: head [4, 2])\n" + ta.PrintTensorRecursively(dX) in out
    assert "# gradient of Y with respect to W (head: head [4, 2])\n" + ta.PrintTensorRecursively(dW) in out
    assert out.index("respect to X") < out.index("respect to W")


def test_show_skips_integer_placeholders(script, capsys):
    assert cli.main(["show", f"{script}:Z", "--no-lower"]) == 0
    out = capsys.readouterr().out
    assert "# N is int32: not differentiable, skipped" in out
    assert "with respect to W" in out and "with respect to N" not in out


def test_show_prints_lowered_loops(script, capsys):
    assert cli.main(["show", f"{script}:Y"]) == 0
    out = capsys.readouterr().out
    assert "# lowered loops of the gradient with respect to X (work " in out
    assert "# lowered loops of the gradient with respect to W (work " in out


def test_show_runs_main_block_only_when_asked(script, capsys):
    assert cli.main(["show", f"{script}:MAIN_ONLY", "--no-lower"]) == 2
    assert "defines no variable 'MAIN_ONLY'" in capsys.readouterr().err
    assert cli.main(["show", f"{script}:MAIN_ONLY", "--no-lower", "--as-main"]) == 0


@pytest.mark.parametrize("target, message", [
    ("{script}", "expected FILE.py:TENSOR"),
    ("{script}:", "expected FILE.py:TENSOR"),
    ("{script}.missing:Y", "no such file"),
    ("{script}:Q", "defines no variable 'Q'; its tensors are: W, N, X, Y, Z"),
    ("{script}:not_a_tensor", "not_a_tensor is an int, not a tensor"),
    ("{script}:a-b", "'a-b' is not a variable name"),
])
def test_show_usage_errors(script, capsys, target, message):
    assert cli.main(["show", target.format(script=script)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorad: error: ") and message.replace("W, N, X", "N, W, X") in err


def test_show_reports_a_failing_script(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom')\n")
    assert cli.main(["show", f"{bad}:Y"]) == 1
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err and "running" in err and "failed" in err


@pytest.fixture
def fake_benchmarks(tmp_path, monkeypatch):
    """Make ``benchmarks`` a throwaway package written by the test; restore the real one after."""
    saved = {m: mod for m, mod in sys.modules.items() if m == "benchmarks" or m.startswith("benchmarks.")}
    for name in saved:
        del sys.modules[name]
    pkg = tmp_path / "fake" / "benchmarks"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))  # also restores sys.path afterwards
    yield pkg
    for name in [m for m in sys.modules if m == "benchmarks" or m.startswith("benchmarks.")]:
        del sys.modules[name]
    sys.modules.update(saved)


def test_bench_forwards_every_argument(tmp_path, fake_benchmarks):
    record = tmp_path / "args.txt"
    (fake_benchmarks / "__main__.py").write_text(textwrap.dedent(f"""
        import sys
        def main(argv=None):
            open({str(tmp_path / "args.txt")!r}, "w").write(" ".join(sys.argv[1:]))
            return 3
        if __name__ == "__main__":
            sys.exit(main())
    """))
    assert cli.main(["bench", "--quick", "--workloads", "dense,conv2d"]) == 3
    assert record.read_text() == "--quick --workloads dense,conv2d"


def test_bench_without_benchmarks_is_a_clear_error(tmp_path, monkeypatch, capsys, fake_benchmarks):
    # the fake package has neither __main__ nor main()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli.pathlib.Path, "is_dir", lambda self: False)  # hide the repository's
    assert cli.main(["bench"]) == 2
    assert "the benchmarks are not available" in capsys.readouterr().err
