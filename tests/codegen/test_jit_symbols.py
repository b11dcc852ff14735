"""The JIT refuses object code that uses a symbol nothing defines (codegen/jit.load_object).

LLVM's runtime linker binds such a symbol to address 0, and the first call through it crashes
the process: a kernel with parallel loops linked before libgomp was loaded did (see
``test_checked.py::test_parallel_kernel_links_its_runtime_in_a_fresh_process``).  The ELF
symbol table is read by ``codegen/jit/object_check.undefined_symbols``.
"""

from __future__ import annotations

import sys

import pytest

import tensorad  # noqa: F401  (loads the code generator)

JIT = sys.modules["tensorad.codegen.jit.engine"]
OBJCHECK = sys.modules["tensorad.codegen.jit.object_check"]

IR = """
declare void @"tensorad_test_nothing_defines_this"()
declare ptr @"memcpy"(ptr, ptr, i64)
define void @"tensorad_test_caller_{n}"(ptr %a, ptr %b) {{
  call void @"tensorad_test_nothing_defines_this"()
  %r = call ptr @"memcpy"(ptr %a, ptr %b, i64 8)
  ret void
}}
"""


def test_undefined_symbols_are_read_from_the_object():
    obj = JIT.compile_object(IR.format(n=0), 0)
    assert set(OBJCHECK.undefined_symbols(obj)) == {"tensorad_test_nothing_defines_this", "memcpy"}


def test_an_unresolved_symbol_is_a_clear_error_not_a_call_to_address_zero():
    obj = JIT.compile_object(IR.format(n=1), 0)
    with pytest.raises(RuntimeError, match="tensorad_test_nothing_defines_this"):
        JIT.load_object(obj, ["tensorad_test_caller_1"])
