"""How often the generator draws each public name and option (a survey of the fuzzer's coverage).

``python -m fuzz.coverage [--n 2000] [--start 0] [--forms21]`` generates the programs of
``n`` seeds (no tensorad needed: programs are source text) and counts, per feature of API.md
-- language calls, operators, dtypes, ``ta.topi`` layers, differentiation calls, ``ta.function``
policies, build options, calling conventions -- how many programs draw it.  A feature drawn
never or rarely is a blind spot of the fuzzer.  What the checks add per seed (an ``override``
on a third of the seeds, two heads in ``jvp`` on a quarter, ``split``'s policy) is counted by
the seed rules :mod:`.checks` applies.
"""

from __future__ import annotations

import argparse
import re

from .checks import ALL, split_policy
from .program import CALLING, CALLING22, PRELUDE, Program, generate


def _src(pattern: str):
    rx = re.compile(pattern, re.M)
    return lambda p, s, seed: rx.search(s) is not None


def _opt(key: str, value=None):
    return lambda p, s, seed: key in p.options and (value is None or p.options[key] == value)


def _attr(name: str, value):
    return lambda p, s, seed: getattr(p, name) == value


def _policy(prefix: str):
    return lambda p, s, seed: p.safe and str(split_policy(seed)).startswith(prefix)


# feature -> predicate(program, its source, seed); the source is what a worker executes
FEATURES: dict = {
    # section 1: the language
    "compute tuple body": _src(r"^\w+, \w+ = ta\.compute\("),
    "reduce_axis empty box": _src(r"reduce_axis\(\((-?\d+), \1\)"),
    "sum": _src(r"ta\.sum\("), "max": _src(r"ta\.max\("), "min": _src(r"ta\.min\("),
    "prod": _src(r"ta\.prod\("),
    "reducer axis given bare (not a list)": _src(r"ta\.(sum|max|min|prod)\(.*axis=r\d+[,)]"),
    "comm_reducer argmax/argmin": _src(r"ARG(MAX|MIN)\(\("), "comm_reducer product": _src(r"MYPROD\("),
    "comm_reducer two floats": _src(r"SUMMAX\("), "comm_reducer selecting": _src(r"MAXABS\("),
    "comm_reducer three values": _src(r"name='triple'"),
    "where= on an index condition": _src(r"where=[^>]*[<=%]"), "where= on data": _src(r"where=\(.*\) > 0\.0"),
    "select": _src(r"ta\.select\("), "if_then_else": _src(r"ta\.if_then_else\("),
    "const": _src(r"ta\.const\("), "cast to int": _src(r"ta\.cast\('int"),
    "cast to float32 in a float64 program": _src(r"ta\.cast\('float32', "),
    "cast to half in a body": _src(r"ta\.cast\('b?float16', "),
    **{f"math {f}": _src(rf"ta\.{f}\(") for f in ("exp", "log", "sqrt", "tanh", "sigmoid", "abs", "power",
                                                 "sin", "cos", "erf", "maximum", "minimum")},
    "operator **": _src(r"\) \*\* "), "operator /": _src(r"\) / "), "unary -": _src(r"-\("),
    **{f"comparison {c}": _src(rf"\S {re.escape(c)} \S") for c in ("<", "<=", ">", ">=", "==", "!=")},
    "logical &": _src(r"\) & \("), "logical |": _src(r"\) \| \("), "logical ~": _src(r"~\("),
    "index //": _src(r"\) // \d"), "index %": _src(r"% \d+\]|% \d+,"),
    "index // by a negative constant": _src(r"// -\d"), "index % by a negative constant": _src(r"% -\d"),
    "float // and %": _src(r"\) (//|%) (\(|-0.5|0.75)"),
    "index value as data": _src(r"ta\.cast\(DT, \(?i\d"),
    "gather take clip": _src(r"mode='clip'"), "gather take wrap": _src(r"mode='wrap'"),
    "gather take raise": _src(r"mode='raise'"),
    "0-d tensor": _src(r"ta\.(placeholder|compute)\(\(\),"),
    "int32 input": _src(r"ta\.placeholder\([^)]*\), 'int32'"),
    "int64 input": _src(r"ta\.placeholder\([^)]*\), 'int64'"),
    "int64 compute": _src(r"ta\.cast\('int64', [^)]*\) (//|%|\+|-|\*)"),
    "tag=": _src(r"tag="),
    # dtypes
    **{f"dtype {d}": _attr("dtype", d) for d in ("float32", "float64", "float16", "bfloat16")},
    "half stored (dtype=)": _src(r", dtype=DT\)"),
    # section 2: differentiation and the optimizer (the checks)
    "safe (derivatives checked)": lambda p, s, seed: p.safe,
    "override (seed rule)": lambda p, s, seed: p.safe and seed % 3 == 2,
    "jvp with two heads (seed rule)": lambda p, s, seed: p.safe and seed % 4 == 1,
    **{f"ta.function policy {n}": _policy(n) for n in ("default", "save_all", "recompute_all", "SavePolicy")},
    "InlineNonReductions (the optimizer check, every program)": lambda p, s, seed: True,
    "ta.Jacobian, ta.gradient without a head (the jacobian check)": lambda p, s, seed: p.safe,
    "generalized_matmul": _src(r"generalized_matmul\("),
    # section 5 and 6: ta.topi
    **{f"topi {n}": _src(rf"ta\.topi\.{re.escape(n)}\(") for n in (
        "add", "subtract", "multiply", "divide", "sum", "max", "min", "prod", "mean", "var", "exp", "log",
        "erf", "reshape", "transpose", "matmul", "take", "nn.dense", "nn.relu", "nn.softmax",
        "nn.log_softmax", "nn.flatten", "nn.gelu", "nn.silu", "nn.layer_norm", "nn.rms_norm", "nn.pad",
        "nn.conv2d", "nn.pool", "nn.embedding", "nn.cross_entropy", "nn.batch_norm", "nn.group_norm",
        "nn.scaled_dot_product_attention", "nn.upsampling", "nn.conv2d_transpose")},
    "topi dense with bias": _src(r"nn\.dense\([^()]*, [^()]*, "),
    "topi layer_norm with gamma and beta": _src(r"nn\.layer_norm\(\w+, (?!ndim)\w+"),
    # data and calling
    **{f"data {d}": _attr("data", d) for d in ("unit", "smooth", "nasty", "wide", "huge", "special")},
    **{f"calling {c}": _attr("calling", c) for c in CALLING + CALLING22},
    # build options (section 4, 6, and codegen.options.Options)
    **{f"option {k}": _opt(k) for k in ("num_threads", "parallel_min_work", "fastmath", "vector_width",
                                         "fuse", "opt_level", "microkernel", "tile", "target", "parallel",
                                         "tune", "inline", "materialize", "variants")},
    "option fastmath=False": _opt("fastmath", False), "option microkernel=False": _opt("microkernel", False),
    "option opt_level=3": _opt("opt_level", 3),
    "option num_threads=4": _opt("num_threads", 4),
}


def count(seeds, **kw) -> tuple[int, dict]:
    """``(programs, {feature: programs that draw it})`` over ``seeds``."""
    hits = dict.fromkeys(FEATURES, 0)
    n = 0
    for seed in seeds:
        p: Program = generate(seed, **kw)
        s = p.render().replace(PRELUDE, "")  # (the reducers' definitions draw nothing)
        n += 1
        for name, pred in FEATURES.items():
            hits[name] += bool(pred(p, s, seed))
    return n, hits


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.coverage", description=__doc__)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--forms21", action="store_true", help="the generator without forms22 and later")
    args = ap.parse_args(argv)
    kw = {"forms22": False} if args.forms21 else {}
    n, hits = count(range(args.start, args.start + args.n), **kw)
    print(f"{n} programs; checks {', '.join(ALL)} on each (derivative checks on safe ones)")
    for name, k in sorted(hits.items(), key=lambda kv: kv[1]):
        print(f"{k:6d} {100 * k / n:6.1f}%  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
