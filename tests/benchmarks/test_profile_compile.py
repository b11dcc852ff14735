"""``tools/profile_compile.py``: a cold build's LLVM time split per function.

The tool records every module a build compiles and compiles each defined function again alone
(the others declared).  These tests count what it finds -- functions, glue marked ``optnone``,
machine instructions -- never its times.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys

from tensorad.codegen.runtime.threads import parallel_runtime

import tensorad as ta

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("profile_compile",
                                               os.path.join(ROOT, "tools", "profile_compile.py"))
pc = sys.modules.setdefault("profile_compile", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(pc)


def _program():
    X = ta.placeholder((24, 40), "float32", "X")
    k = ta.reduce_axis((0, 40), "k")
    S = ta.compute((24,), lambda i: ta.sum(X[i, k] * X[i, k], k), name="S")
    Y = ta.compute((24, 40), lambda i, j: ta.exp(X[i, j] * 0.5) / S[i], name="Y")
    return [Y], [X]


def test_every_function_of_a_kernel_is_compiled_alone():
    outs, ins = _program()
    parallel_runtime()  # (the pool's module, compiled by a process's first build when not on disk)
    compiled = pc.record(lambda: ta.build(outs, ins, cache=False))
    kernels = [c for c in compiled if not c.library]
    assert len(kernels) == 1  # (library pieces, if any, may be linked already in this process)
    defined = re.findall(r"^define [^@]*@\"?([\w.$]+)\"?\(", kernels[0].text, re.M)
    rows = [r for r in pc.profile(compiled) if r.module == compiled.index(kernels[0])]
    assert [r.name for r in rows] == defined and len(defined) >= 2  # nests, the glue main
    assert not any(r.error for r in rows)
    assert all(r.instructions > 0 and r.passes >= 0 and r.codegen >= 0 for r in rows)
    glue = {r.name for r in rows if r.optnone}
    assert any(n.endswith("_main") for n in glue) and not any("nest" in n for n in glue)


def test_a_function_alone_keeps_its_code():
    """Alone, a nest is the same function: internal linkage dropped (LLVM would delete an
    unused internal function), its callees declared, the module still valid."""
    text = "\n".join([
        "define internal void @\"a\"(ptr noalias %\".1\", i64 %\".2\") nounwind",
        "{", "entry:", "  ret void", "}",
        "define void @\"b\"(ptr %\".1\") nounwind", "{", "entry:",
        "  call void @\"a\"(ptr %\".1\", i64 3)", "  ret void", "}"])
    alone = dict((name, t) for name, t, _ in pc.functions(text))
    assert "declare void @\"a\"(ptr, i64) nounwind" in alone["b"] and "define void @\"a\"" in alone["a"]
    for t in alone.values():
        passes, codegen, instructions = pc.cost(t, 3, False)
        assert instructions >= 1



def test_a_function_compiled_again_under_other_names_is_found():
    """A gradient's kernel compiles again a nest its forward's kernel compiled (the same text, its
    kernel's and nest's names aside): ``repeats`` pairs them, and leaves a function of its own alone."""
    def nest(name: str, body: str) -> str:
        return f'define void @"{name}"(ptr %".1") nounwind\n{{\nentry:\n  {body}\n  ret void\n}}'

    store = 'store float 1.0, ptr %".1", !llvm.loop !7'
    forward = pc.Compilation(nest("k0123456789abcdef_nest0", store), 3, False, False)
    gradient = pc.Compilation("\n".join([nest("kfedcba9876543210_nest3", store.replace("!7", "!12")),
                                         nest("kfedcba9876543210_nest4", "")]), 3, False, False)
    rows = [pc.FunctionCost(0, "k0123456789abcdef_nest0", False, 0.001, 0.002),
            pc.FunctionCost(1, "kfedcba9876543210_nest3", False, 0.001, 0.002),
            pc.FunctionCost(1, "kfedcba9876543210_nest4", False, 0.001, 0.002)]
    assert pc.repeats([forward, gradient], rows) == [rows[:2]]
