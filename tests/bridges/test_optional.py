"""The bridges are optional: ``import tensorad`` never imports a framework, and asking for a
bridge without its framework says what to install."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_tensorad_imports_no_framework():
    done = _run("import sys, tensorad as ta\n"
                "ta.function\n"
                "loaded = {'torch', 'jax'} & set(sys.modules)\n"
                "assert not loaded, loaded\n")
    assert done.returncode == 0, done.stderr


def test_a_missing_framework_is_a_clear_import_error():
    done = _run("import sys\n"
                "sys.modules['torch'] = None; sys.modules['jax'] = None  # as if not installed\n"
                "import tensorad as ta\n"
                "for name in ('torch', 'jax'):\n"
                "    try:\n"
                "        getattr(ta, name)\n"
                "    except ImportError as e:\n"
                "        print(e)\n"
                "try:\n"
                "    ta.tensorflow\n"
                "except AttributeError as e:\n"
                "    print(e)\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "pip install 'tensorad[torch]'" in lines[0] and "pip install 'tensorad[jax]'" in lines[1]
    assert lines[2] == "module 'tensorad' has no attribute 'tensorflow'"


def test_the_torch_bridge_imports_no_compiler_and_marks_its_traced_calls_as_dynamo_does():
    """Importing ``ta.torch`` imports torch but not Dynamo (torch's compiler, some 1.5 s of CPU): the
    bridge's two calls that ``torch.compile`` records as constants carry the one mark that
    ``torch._dynamo.assume_constant_result`` sets, set without importing Dynamo."""
    pytest.importorskip("torch", reason="an optional extra; make test requires it")
    done = _run("import sys\n"
                "import tensorad.bridges.torch as bridge\n"
                "assert 'torch._dynamo' not in sys.modules\n"
                "import torch._dynamo\n"
                "(mark, value), = vars(torch._dynamo.assume_constant_result(lambda: None)).items()\n"
                "marked = [f for f in vars(bridge).values() if getattr(f, mark, None) is value]\n"
                "assert len(marked) == 2, marked\n")
    assert done.returncode == 0, done.stderr
