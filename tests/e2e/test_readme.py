"""The README's first example runs as written and computes the right gradients."""

from __future__ import annotations

import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_runs_and_matches_numpy(capsys):
    source = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    scope: dict = {}
    exec(compile(source, str(README), "exec"), scope)
    x, h, dw, db = (scope[k] for k in ("x", "h", "dw", "db"))
    np.testing.assert_allclose(dw, h.T @ x, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(db, h.sum(axis=0), rtol=1e-5, atol=1e-4)
    printed = capsys.readouterr().out
    gradient_text, loops = printed.split("kernel kernel(", 1)
    assert gradient_text.count("Reduction") == 1  # dW: one reduction over the batch, nothing else
    assert "for i in range(0, 32)" in loops
