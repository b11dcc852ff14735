"""The tutorial notebook runs from top to bottom in a real Jupyter kernel, and says what it should."""

from __future__ import annotations

import pathlib
import re

import nbformat
from nbclient import NotebookClient

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "autodiff_tutorial.ipynb"


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def test_tutorial_executes_and_shows_the_optimized_gradient():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    code = [c for c in nb.cells if c.cell_type == "code"]
    by_source = {c.source.strip(): _text(c) for c in code}
    dw_text = by_source["print(ta.PrintTensorRecursively(dW))"]
    # The optimized dW of the dense layer is one reduction over the batch and nothing else.
    assert dw_text.count("Reduction") == 1
    assert re.search(r"axes \(\w[\w.]* : \[0, 31\]\)", dw_text.split("Reduction")[1])
    assert "jac" not in dw_text
    # The raw Jacobian really is the 4-d tensor with a delta inside its reduction.
    raw = next(t for s, t in by_source.items() if s.startswith("Y0 = "))
    assert "[32, 1000, 1000, 1000]" in raw
    # Every timing cell printed its figures.
    assert sum("backward ms" in t for t in by_source.values()) >= 6
    # The HTML display of a tensor is there.
    loops, tensor = code[-2], code[-1]
    for cell in (loops, tensor):
        assert any("text/html" in o.get("data", {}) for o in cell.outputs)
    assert "# nest" in _text(loops) and ": work " in _text(loops)
