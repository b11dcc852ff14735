"""``python tools/profile_compile.py [--workloads attention,conv3x3s2_relu] [--top 12]``

Where a cold build's LLVM time goes, per function ("a cold define -> differentiate ->
build is <= 0.5 s per layer").  ``python -m benchmarks.compile_time`` splits a cold build by
phase; this splits its ``passes`` and ``codegen`` phases further: every module a cold build
hands to LLVM (the kernels' modules and the matrix-product library's pieces, recorded by
wrapping :func:`tensorad.codegen.jit.engine.compile_object`) is compiled again, function by
function -- each alone in a module that declares the others, with the pipeline the build
used -- and timed (CPU seconds of LLVM's passes, then of code generation), with the number of
machine instructions it became.  A function alone pays a module's fixed cost (~2-4 ms), so
the rows add up to more than the module; ``optnone`` glue is listed too.  Last, the functions
compiled more than once (:func:`repeats`: a forward's nests that the gradient's kernel compiles
again), with what the repeats cost.

Each workload runs in this process with an empty disk cache of its own (cold: the library's
pieces are compiled, unless an earlier workload of the same run linked them already).  Timing
lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass

_DEFINE = re.compile(r"^define (?:internal |private )?(.*?)@\"?([\w.$]+)\"?\((.*)$")
_PARAM_ATTRS = re.compile(r"(?: noalias| nocapture| readonly| writeonly| nonnull| noundef| align \d+"
                          r"| dereferenceable\(\d+\))* %\"?[\w.]+\"?")


@dataclass
class Compilation:
    """One module a build compiled: its IR text, optimization level, light pipeline or not,
    and whether it is a piece of the matrix-product library."""

    text: str
    level: int
    light: bool
    library: bool


@dataclass
class FunctionCost:
    """One function compiled alone: CPU seconds of LLVM's passes and of code generation, the
    machine instructions it became; ``error`` when its module could not be made."""

    module: int
    name: str
    optnone: bool
    passes: float = 0.0
    codegen: float = 0.0
    instructions: int = 0
    error: str = ""


def record(build) -> list[Compilation]:
    """Run ``build()`` and return every module it compiled, in order (one at a time: a
    build's side-by-side compiles, :func:`tensorad.codegen.jit.engine.compile_objects`, too)."""
    from tensorad.codegen.jit import engine as jit

    done: list[Compilation] = []
    original = jit.compile_object

    def wrapped(ir_text, opt_level=3, target=None, light=False):
        library = re.search(r'^; ModuleID = "tensorad_gemm_', ir_text, re.M) is not None
        done.append(Compilation(ir_text, opt_level, light, library))
        return original(ir_text, opt_level, target, light)

    several = jit.compile_objects

    def wrapped_several(modules, target=None):
        return [(wrapped(text(), level, target, light), 0.0) for text, level, light in modules]

    jit.compile_object, jit.compile_objects = wrapped, wrapped_several
    try:
        build()
    finally:
        jit.compile_object, jit.compile_objects = original, several
    return done


def functions(text: str) -> list[tuple[str, str, str]]:
    """The module's defined functions: ``(name, module text with it alone, its define line)`` --
    the others become declarations, and the function itself external, so LLVM keeps it."""
    lines = text.split("\n")
    head: list[str] = []
    bodies: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(lines):
        m = _DEFINE.match(lines[i])
        if m is None:
            head.append(lines[i])
            i += 1
            continue
        j = i
        while lines[j] != "}":
            j += 1
        bodies.append((m.group(2), lines[i:j + 1]))
        i = j + 1
    out = []
    for name, body in bodies:
        decls = [_declaration(other[0]) for n, other in bodies if n != name]
        alone = [re.sub(r"^define (?:internal|private) ", "define ", body[0])] + body[1:]
        out.append((name, "\n".join(head + decls + alone), body[0]))
    return out


def _declaration(define_line: str) -> str:
    d = re.sub(r"^define (?:internal |private )?", "declare ", define_line.rstrip(" {"))
    d = re.sub(r" #\d+", "", d)
    return _PARAM_ATTRS.sub("", d)


def _optnone(define_line: str, text: str) -> bool:
    if "optnone" in define_line:
        return True
    group = re.search(r"#(\d+)", define_line)
    attrs = group and re.search(rf"^attributes #{group.group(1)} = \{{([^}}]*)\}}", text, re.M)
    return bool(attrs and "optnone" in attrs.group(1))


def cost(text: str, level: int, light: bool, target=None) -> tuple[float, float, int]:
    """CPU seconds of LLVM's passes and of code generation for one module, and the number of
    machine instructions it became."""
    from tensorad.codegen.jit import compile_job
    from tensorad.codegen.jit import engine as jit

    target = target or jit.host()
    tm = jit.target_machine(target)
    mod = compile_job.parse(text, compile_job.Machine(target.triple, target.cpu, target.features), tm)
    c0 = time.process_time()
    compile_job.Pipeline(level, light=light).run(mod, tm)
    c1 = time.process_time()
    jit.target_machine(target).emit_object(mod)
    c2 = time.process_time()
    asm = jit.target_machine(target).emit_assembly(mod)
    count = sum(1 for line in asm.split("\n") if line.startswith("\t") and not line.startswith("\t."))
    return c1 - c0, c2 - c1, count


def profile(compiled: list[Compilation], target=None) -> list[FunctionCost]:
    """Every function of every kernel module, and every library piece as a whole."""
    rows = []
    for k, c in enumerate(compiled):
        if c.library:
            defined = [re.sub(r"^tensorad_gemm_\w+?_t[0-9a-f]{10}_", "", n) for n, _, _ in functions(c.text)]
            row = FunctionCost(k, "library: " + ", ".join(defined), False)
            row.passes, row.codegen, row.instructions = cost(c.text, c.level, c.light, target)
            rows.append(row)
            continue
        for name, alone, define_line in functions(c.text):
            row = FunctionCost(k, name, _optnone(define_line, c.text))
            try:
                row.passes, row.codegen, row.instructions = cost(alone, c.level, c.light, target)
            except RuntimeError as e:  # (a module text this splitter got wrong: say so, go on)
                row.error = str(e).splitlines()[0][:200]
            rows.append(row)
    return rows


_BODY = re.compile(r'^define[^\n]*?@"?([\w.$]+)"?\(.*?^}', re.M | re.S)
_OWN_NAMES = re.compile(r"k[0-9a-f]{16}_(?:nest|fill|omp|glue)\d+|!\d+")


def repeats(compiled: list[Compilation], rows: list[FunctionCost]) -> list[list[FunctionCost]]:
    """The kernel functions a build compiled more than once: sets of two or more whose text is the same
    but for kernel and nest names and metadata numbers (a forward's nest that the gradient's kernel
    compiles again), the costliest set first."""
    cost = {(r.module, r.name): r for r in rows}
    same: dict[str, list[FunctionCost]] = {}
    for k, c in enumerate(compiled):
        for m in [] if c.library else _BODY.finditer(c.text):
            if (k, m.group(1)) in cost:
                same.setdefault(_OWN_NAMES.sub("_", m.group(0)), []).append(cost[k, m.group(1)])
    sets = [rs for rs in same.values() if len(rs) > 1]
    return sorted(sets, key=lambda rs: -sum(r.passes + r.codegen for r in rs[1:]))


def _workload_build(name: str, function: bool = False):
    import tensorad as ta
    from benchmarks import sys_tensorad, workloads

    w = workloads.BY_NAME[name]
    ints = w.params.get("ints", {})
    p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k) for k, s in w.input_shapes().items()}
    y = sys_tensorad.topi_forward(w.kind, p, w.params)
    if function:  # ta.function's training step: the forward keeping its saved values, the backward
        f = ta.function(y, list(p.values()), wrt=[p[g] for g in w.grads])
        assert f.saved is not None  # (differentiated before the recording)
        return lambda: (f.residual_kernel, f.backward_kernel)
    head = ta.placeholder(y.shape, "float32", "H")
    grads = list(ta.JacobianRecursive(y, [p[g] for g in w.grads], head))

    def build():
        ta.build([y], list(p.values()))
        ta.build(grads, list(p.values()) + [head])
    return build


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python tools/profile_compile.py", description=__doc__.split("\n")[2])
    ap.add_argument("--workloads", default="attention,conv3x3s2_relu,conv3x3_relu,gelu_mlp,max_pool3s2")
    ap.add_argument("--top", type=int, default=12, help="kernel functions listed per workload")
    ap.add_argument("--function", action="store_true", help="build ta.function's training step")
    args = ap.parse_args(argv)
    saved = os.environ.get("TENSORAD_CACHE_DIR")
    for name in args.workloads.split(","):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["TENSORAD_CACHE_DIR"] = cache  # (read by every disk-cache access)
            try:
                compiled = record(_workload_build(name, args.function))
            finally:
                os.environ.pop("TENSORAD_CACHE_DIR")
                if saved is not None:
                    os.environ["TENSORAD_CACHE_DIR"] = saved
        rows = profile(compiled)
        kernels = sorted((r for r in rows if not compiled[r.module].library),
                         key=lambda r: -(r.passes + r.codegen))
        print(f"== {name}: {len(compiled)} modules ({sum(c.library for c in compiled)} library pieces)")
        print(f"{'module':>6} {'function':<44} {'passes':>8} {'codegen':>8} {'instrs':>7}  (ms CPU, alone)")
        for r in [r for r in rows if compiled[r.module].library] + kernels[:args.top]:
            flag = " optnone" if r.optnone else (" ERROR " + r.error if r.error else "")
            print(f"{r.module:>6} {r.name[-44:]:<44} {r.passes * 1e3:8.1f} {r.codegen * 1e3:8.1f} "
                  f"{r.instructions:7d}{flag}")
        again = repeats(compiled, rows)
        spent = sum(r.passes + r.codegen for rs in again for r in rs[1:])
        print(f"compiled again (the same text under other names): {sum(len(rs) - 1 for rs in again)} "
              f"functions, {spent * 1e3:.1f} ms CPU alone")
        for rs in again:
            print(f"  {sum(r.passes + r.codegen for r in rs[1:]) * 1e3:8.1f} ms  "
                  + ", ".join(f"{r.module}:{r.name}" for r in rs))
        sys.stdout.flush()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # (benchmarks)
    main()
