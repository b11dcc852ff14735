"""Registers ``workloads.py`` as the module ``simplify_workloads`` (the tests folder is not on
``sys.path``; see ``tests/conftest.py``)."""

from __future__ import annotations

import importlib.util
import os
import sys


def _register() -> None:
    if "simplify_workloads" in sys.modules:
        return
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads.py")
    spec = importlib.util.spec_from_file_location("simplify_workloads", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["simplify_workloads"] = module
    spec.loader.exec_module(module)


_register()
