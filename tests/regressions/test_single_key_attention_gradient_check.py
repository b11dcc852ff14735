"""The sizes benchmark halves the Transformer block's sequence length at large batches, down to 1 at
4096 rows, and called tensorad's gradients WRONG there against PyTorch float64.  With one key, causal
attention's softmax is the constant 1, so the loss's gradient through the queries and keys, and thus
through ``Wq`` and ``Wk``, is exactly zero: tensorad returns 0, PyTorch float64 returns rounding noise of
about 1e-17, PyTorch float32 about 1e-9.  The check measured each output's error relative to its own
reference, float64's noise, so every float32 answer failed.  It now measures an output whose reference is
below ``RTOL`` of the largest reference of the program against that share, and still flags a wrong
gradient of that size."""

import os
import sys
from dataclasses import replace

import numpy as np
import pytest

import tensorad as ta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks import check, sizes, sys_torch  # noqa: E402
from benchmarks.workloads import BY_NAME  # noqa: E402

ROWS = 4
D, V = 16, 8  # (the smallest widths whose float64 gradients through Wq and Wk are noise, not 0)


def _shapes(n: int) -> dict[str, tuple[int, ...]]:
    sq, vec = (D, D), (D,)
    return {"tokens": (n, 1), "labels": (n, 1), "E": (V, D), "g1": vec, "b1": vec, "Wq": sq, "Wk": sq,
            "Wv": sq, "Wo": sq, "g2": vec, "b2": vec, "W1": (D, 4 * D), "c1": (4 * D,), "W2": (4 * D, D),
            "Wout": (D, V)}


@pytest.mark.slow  # (~10 CPU-s: importing torch, building the block's gradients)
def test_single_key_gradients_pass_and_a_wrong_one_fails():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    full = BY_NAME["transformer_block"]
    w = replace(full, tiny=_shapes(ROWS))
    (_, _), (grads, inputs) = sizes.programs(ta, w, ROWS, 1, tiny=True)
    kernel = ta.build(grads, inputs)
    assert sizes.against_pytorch(w, kernel, True, ROWS, tiny=True)["ok"]

    arrays = sizes.make_inputs(w, tiny=True)
    _, head, ref = sys_torch.autograd_reference(w, arrays, sizes.head_of)
    refs = list(ref.values())
    largest = max(np.abs(r).max() for r in refs)
    noise = max(np.abs(ref["Wq"]).max(), np.abs(ref["Wk"]).max())
    assert 0 < noise < 1e-12 * largest  # zero, as float64 rounds

    # PyTorch float32's own gradients (noise where the exact value is zero) pass
    f = sys_torch.forward_fn(w.kind, w.params)
    args = {k: torch.from_numpy(a).requires_grad_(k in w.grads) for k, a in arrays.items()}
    ours32 = [g.numpy() for g in torch.autograd.grad(f(*args.values()), [args[g] for g in w.grads],
                                                      torch.from_numpy(head))]
    assert check.compare(ours32, refs)["ok"]

    # a gradient through the query off by twice the tolerance (RTOL of that share) still fails
    got = ta.symbolic.listed(kernel(*arrays.values(), head))
    assert not np.any(got[w.grads.index("Wq")]) and not np.any(got[w.grads.index("Wk")])  # the exact zero
    got[w.grads.index("Wq")] = got[w.grads.index("Wq")] + 2 * check.RTOL ** 2 * largest
    assert not check.compare(got, refs)["ok"]
