"""The matrix-product library's disk entries are keyed by the library's own source, not the compiler's.

A piece's object code depends on the target, LLVM and the source of ``gemmlib`` and what it
imports (:mod:`tensorad.codegen.gemm.version`); an edit of lowering, the optimizer or autodiff
must not make the next process compile the library again.  The closure is checked against one
found here with Python's own parser, and the key against a changed compiler fingerprint and a
changed library version (counted, never timed).
"""

from __future__ import annotations

import ast
import sys

from tensorad.codegen.gemm import library as gemmlib
from tensorad.codegen.gemm import version as libversion
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.target import parse_target

import tensorad  # noqa: F401  (every package imported, as in a build)

ROOT = "tensorad.codegen.gemm.library"


def _module_exists(name: str) -> bool:
    return libversion._path(name, {}) is not None


def _ast_closure(root: str) -> set[str]:
    """The oracle: every ``tensorad`` module reached by import statements, read by ``ast``."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        module = todo.pop()
        path = libversion._path(module, {})
        if module in seen or path is None:
            continue
        seen.add(module)
        package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = (base + ("." + node.module if node.module else "")) if node.level else node.module
                if not target or not target.startswith("tensorad"):
                    continue
                subs = [f"{target}.{a.name}" for a in node.names if _module_exists(f"{target}.{a.name}")]
                todo.extend(subs if len(subs) == len(node.names) else [*subs, target])
            elif isinstance(node, ast.Import):
                todo.extend(a.name for a in node.names if a.name.startswith("tensorad"))
    return seen


def test_the_closure_is_what_the_import_statements_reach():
    found = set(libversion.closure(ROOT))
    assert found == _ast_closure(ROOT)
    assert {"tensorad.codegen.gemm.pack_routines", "tensorad.codegen.llvm.ir_loops",
            "tensorad.codegen.jit.engine"} <= found
    # the rest of the compiler is not the library's source
    compiler = {m for m in sys.modules if m.startswith(("tensorad.codegen.", "tensorad.simplify.",
                                                        "tensorad.autodiff."))}
    left_out = compiler - found
    assert {"tensorad.codegen.lower", "tensorad.codegen.loops.schedule",
            "tensorad.simplify.program"} <= left_out
    assert not any(m.startswith(("tensorad.simplify", "tensorad.autodiff")) for m in found)


def test_a_pieces_key_follows_the_library_source_not_the_compilers(monkeypatch):
    target = parse_target("llvm -mcpu=haswell")
    symbol = gemmlib.driver_symbol("float32", 4, 24, target)
    key, text = gemmlib.entry_key(symbol, target)
    assert target.key in text and jit.toolchain() in text
    monkeypatch.setattr(jit._PROCESS, "source_hash", "an edited optimizer")  # the kernels' fingerprint moves
    assert gemmlib.entry_key(symbol, target) == (key, text)
    monkeypatch.setitem(libversion._PROCESS.versions, ROOT, "an edited packer")  # the library's source moves
    assert gemmlib.entry_key(symbol, target)[0] != key
    other = parse_target("llvm -mcpu=skylake-avx512")
    assert gemmlib.entry_key(gemmlib.driver_symbol("float32", 4, 24, other), other)[0] != key
