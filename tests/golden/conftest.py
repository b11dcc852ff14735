"""Registers ``corpus.py`` as the module ``golden_corpus`` (the tests folder is not on
``sys.path``; see ``tests/conftest.py``)."""

from __future__ import annotations

import importlib.util
import os
import sys


def _register() -> None:
    if "golden_corpus" in sys.modules:
        return
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.py")
    spec = importlib.util.spec_from_file_location("golden_corpus", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["golden_corpus"] = module
    spec.loader.exec_module(module)


_register()
