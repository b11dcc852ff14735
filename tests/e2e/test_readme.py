"""The README's five-minute example runs as written and computes the right gradients."""

from __future__ import annotations

import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_runs_and_matches_numpy(capsys):
    source = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    scope: dict = {}
    exec(compile(source, str(README), "exec"), scope)
    x, w, h, dx, dw = (scope[k] for k in ("x", "w", "h", "dx", "dw"))
    g = h * (1 - np.tanh(x @ w.T) ** 2)
    np.testing.assert_allclose(dw, g.T @ x, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dx, g @ w, rtol=1e-4, atol=1e-3)
    assert scope["loops"].work == 3 * 64 * 128 * 256  # three products, nothing over zeros
    printed = capsys.readouterr().out
    gradient_text, loops = printed.split("kernel kernel(", 1)
    w_grad = gradient_text.split("tensor Z.grad")[0]
    assert w_grad.count("Reduction") == 1 and "axes (i : [0, 63])" in w_grad  # one sum over the batch
    assert "# nest " in loops and "work: 6291456" in loops
