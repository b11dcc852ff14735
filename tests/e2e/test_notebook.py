"""The tutorial notebook runs from top to bottom in a real Jupyter kernel, and walks the path of a
user: a custom layer, its gradient, the optimizer's effect on ``.work``, the printed loops, speed
against PyTorch, training inside PyTorch.  Every kernel it builds is compared with a reference."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import nbformat
import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "autodiff_tutorial.ipynb"
BUILDER = NOTEBOOK.with_name("build_tutorial.py")


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def test_notebook_is_generated_from_its_builder():
    spec = importlib.util.spec_from_file_location("build_tutorial", BUILDER)
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # regenerate with `python notebooks/build_tutorial.py` after editing the builder
    assert [(c.cell_type, c.source) for c in nb.cells] == \
        [("markdown" if kind == "md" else "code", src) for kind, src in builder.CELLS]


@pytest.mark.slow
def test_tutorial_executes_and_walks_the_user_path():
    from nbclient import NotebookClient  # (Jupyter's client: imported by the one test that runs a kernel)

    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors[0]["evalue"] if errors else ""
    code = [c for c in nb.cells if c.cell_type == "code"]
    source = "\n".join(c.source for c in code)
    text = "\n".join(_text(c) for c in code)
    for call in ("ta.compute(", "ta.build(", "ta.JacobianRecursive(", ".work", "ta.lower(", ".offered",
                 "ta.gradcheck(", "ta.Jacobian(", "ta.torch.function(", "loss.backward()", "ta.jvp(",
                 "ta.hessian_vector_product(", "plt.bar(", "plt.plot("):
        assert call in source, call
    # every built kernel was compared with a reference; every comparison printed its agreement
    assert text.count("matches NumPy") >= source.count("ta.build(") + 4, text.count("matches NumPy")
    # the custom layer's dW is one reduction over the batch
    dw_text = next(_text(c) for c in code if "print(ta.PrintTensorRecursively(dW))" in c.source)
    w_grad = dw_text.split("tensor Z.grad")[0]
    assert w_grad.count("Reduction") == 1 and "jac" not in dw_text
    assert re.search(r"axes \(\w[\w.]* : \[0, 31\]\)", w_grad)
    # the optimizer's effect, counted
    raw = int(re.search(r"work through the raw Jacobian: ([\d,]+)", text).group(1).replace(",", ""))
    opt = int(re.search(r"work of the optimized dW: +([\d,]+)", text).group(1).replace(",", ""))
    assert opt == 32 * 48 * 64 and raw > 48 * opt  # (the raw route visits every point of the Jacobian)
    assert "True" in text  # gradcheck
    # the printed loops, and the speed against PyTorch as a measured ratio (not asserted)
    assert "# nest " in text and "total work:" in text
    timed = r"(forward|backward) +tensorad +[\d.]+ ms +PyTorch +[\d.]+ ms +ratio [\d.]+"
    assert len(re.findall(timed, text)) == 2
    # training inside PyTorch
    assert re.search(r"loss [\d.]+ -> [\d.]+", text)
    assert sum("image/png" in o.get("data", {}) for c in code for o in c.outputs) == 2  # work, loss
    loops, tensor = code[-2], code[-1]  # the HTML displays
    for cell in (loops, tensor):
        assert any("text/html" in o.get("data", {}) for o in cell.outputs)
    assert "# nest" in _text(loops) and ": work " in _text(loops)
