"""The ``tensorad`` command line (``pyproject``: ``tensorad = "tensorad.cli:main"``): ``--version``;
``show FILE.py:TENSOR``, which runs the script and prints its tensor ``TENSOR``, its optimized gradient
with respect to every placeholder it depends on (reverse mode, head ``head``) and each gradient's lowered
loops and work (``--timings``: also compiles them and prints every compiler stage's time); and
``bench [ARGS...]``, ``python -m benchmarks ARGS...``.  Exit status: 0 on success, 1 when the script or a
pass fails, 2 for a bad command line."""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import runpy
import sys
import traceback
from collections.abc import Sequence

import tensorad as ta
from tensorad.ir import FLOAT_DTYPES, Tensor, placeholders, trace
from tensorad.ir.printer import Namer, a_type

PROG = "tensorad"


class UsageError(Exception):
    """A bad command line: reported in one line, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Automatic differentiation of tensor expressions, compiled by LLVM.")
    parser.add_argument("--version", action="version", version=f"{PROG} {ta.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    show = sub.add_parser(
        "show", help="print a tensor of a script, its gradients and their loops",
        description="Run FILE.py (with __name__ set to '__tensorad_show__', so an "
                    "`if __name__ == '__main__':` block is skipped unless --as-main), take its "
                    "variable TENSOR and print the tensor, its optimized gradient with respect to "
                    "each placeholder it depends on, and the lowered loops of each gradient.")
    show.add_argument("target", metavar="FILE.py:TENSOR")
    show.add_argument("--as-main", action="store_true", help="run the script as __main__")
    show.add_argument("--no-optimize", action="store_true",
                      help="show the gradients without the nonzeroness optimizer")
    show.add_argument("--no-lower", action="store_true", help="do not print the lowered loops")
    show.add_argument("--timings", action="store_true",
                      help="also compile each gradient and print the time of every stage (define, "
                           "differentiate, optimize, lower, llvm, jit, cache hits and misses)")
    sub.add_parser("bench", help="run the benchmarks: python -m benchmarks [ARGS...]",
                   description="Forward every argument to the benchmarks' main().", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "bench":  # everything after `bench` belongs to the benchmarks
            return run_bench(argv[1:])
        args = _parser().parse_args(argv)
        if args.command == "show":
            return show(args.target, as_main=args.as_main, optimize=not args.no_optimize,
                        lower=not args.no_lower, timings=args.timings)
        _parser().print_help()
        return 2
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


def _load_tensor(target: str, as_main: bool) -> tuple[Tensor, str]:
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise UsageError(f"expected FILE.py:TENSOR, got {target!r}")
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")
    if not name.isidentifier():
        raise UsageError(f"{name!r} is not a variable name")
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)  # as `python FILE.py` does: the script may import its neighbours
    try:
        namespace = runpy.run_path(path, run_name="__main__" if as_main else "__tensorad_show__")
    finally:
        sys.path.remove(folder)
    if name not in namespace:
        tensors = sorted(k for k, v in namespace.items() if isinstance(v, Tensor))
        raise UsageError(f"{path} defines no variable {name!r}; its tensors are: "
                         f"{', '.join(tensors) or '(none)'}")
    tensor = namespace[name]
    if not isinstance(tensor, Tensor):
        raise UsageError(f"{path}: {name} is {a_type(tensor)}, not a tensor")
    return tensor, name


def show(target: str, as_main: bool = False, optimize: bool = True, lower: bool = True,
         timings: bool = False) -> int:
    """``tensorad show``: print the tensor, its gradients and (if available) their loops;
    ``timings``: also compile the gradients and print the time of each compiler stage."""
    if not timings:
        return _show(target, as_main, optimize, lower, build=False)
    with trace.collect() as stages:
        status = _show(target, as_main, optimize, lower, build=True)
    print(_timing_table(stages))
    return status


def _timing_table(stages: list[tuple[str, float, str]]) -> str:
    """Stage times: one line per stage run, then the total of each stage."""
    lines = ["# stage times (ms)"]
    lines += [f"{name:<14}{seconds * 1e3:>10.3f}  {detail}" for name, seconds, detail in stages]
    totals: dict[str, list[float]] = {}
    for name, seconds, _ in stages:
        totals.setdefault(name, []).append(seconds)
    lines.append("# totals")
    lines += [f"{name:<14}{sum(v) * 1e3:>10.3f}  ({len(v)}x)" for name, v in totals.items()]
    return "\n".join(lines) + "\n"


def _show(target: str, as_main: bool, optimize: bool, lower: bool, build: bool) -> int:
    try:
        tensor, name = _load_tensor(target, as_main)
    except UsageError:
        raise
    except Exception:  # the user's script failed: show its traceback, exit status 1
        traceback.print_exc()
        print(f"{PROG}: error: running {target.rpartition(':')[0]} failed", file=sys.stderr)
        return 1
    names = Namer()  # one name per tensor across every printout below
    print(f"# tensor {name}")
    print(ta.PrintTensorRecursively(tensor, namer=names))
    if tensor.dtype not in FLOAT_DTYPES:
        print(f"# {name} is {tensor.dtype}: not differentiable")
        return 0
    inputs = placeholders([tensor])
    wrt = [p for p in inputs if p.dtype in FLOAT_DTYPES]
    for p in inputs:
        if p not in wrt:
            print(f"# {p.name} is {p.dtype}: not differentiable, skipped\n")
    if not wrt:
        print(f"# {name} depends on no float placeholder: no gradient to show")
        return 0
    head = ta.placeholder(tensor.shape, tensor.dtype, name="head")
    try:
        grads = ta.JacobianRecursive(tensor, wrt, head, optimize=optimize)
    except Exception:
        traceback.print_exc()
        print(f"{PROG}: error: differentiating {name} failed", file=sys.stderr)
        return 1
    for p, g in zip(wrt, grads):
        print(f"# gradient of {name} with respect to {p.name} (head: head {list(tensor.shape)})")
        print(ta.PrintTensorRecursively(g, namer=names))
        if lower:  # the loops of the gradient, its tensors named as in the printouts, and their work
            lowered = ta.lower([g], placeholders([g]))
            print(f"# lowered loops of the gradient with respect to {p.name} (work {lowered.work})")
            print(f"{lowered.text_with(names)}\n")
        if build:
            ta.build([g], placeholders([g]))
    return 0


def _find_benchmarks() -> None:
    """Makes ``python -m benchmarks`` findable (the current folder first, the repository of the installed
    ``tensorad`` last), else a :class:`UsageError`."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    root = str(pathlib.Path(__file__).resolve().parents[1])
    if root not in sys.path and (pathlib.Path(root) / "benchmarks").is_dir():
        sys.path.append(root)
    try:
        if importlib.util.find_spec("benchmarks.__main__") is not None:
            return
    except (ImportError, ValueError):
        pass
    raise UsageError("the benchmarks are not available: no importable `benchmarks` package with "
                     "a __main__ (run `tensorad bench` from the repository root, or `make bench`)")


def run_bench(args: Sequence[str]) -> int:
    """``tensorad bench ARGS``: exactly ``python -m benchmarks ARGS``."""
    _find_benchmarks()
    saved = sys.argv
    sys.argv = ["python -m benchmarks", *args]
    try:
        runpy.run_module("benchmarks", run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as exc:  # `sys.exit(main())` or argparse inside the benchmarks
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved


if __name__ == "__main__":
    sys.exit(main())
