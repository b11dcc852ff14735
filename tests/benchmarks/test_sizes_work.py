"""The layers of ``benchmarks.sizes`` and its Transformer block, written once over a symbolic batch ``n``,
lower at each size to the work of the program written at that size, forward and backward: the
optimizer's choices made over the size (its cases included) are those it makes at the size."""

import pytest

import tensorad as ta
from benchmarks.sizes import SOFTMAX, programs
from benchmarks.workloads import BY_NAME

LAYERS = ("softmax", "layer_norm", "batch_norm", "log_softmax_nll", "gelu_mlp", "attention",
          "transformer_block")


@pytest.mark.parametrize("name", LAYERS)
def test_work_at_each_size_is_the_static_programs(name):
    w = SOFTMAX if name == "softmax" else BY_NAME[name]
    symbolic = programs(ta, w, ta.size_var("n"), tiny=True)
    for size in (1, 2, 7, 64):
        for (outputs, inputs), (static_out, static_in), label in zip(
                symbolic, programs(ta, w, size, tiny=True), ("forward", "backward")):
            want = ta.lower(static_out, static_in).work
            assert ta.lower(outputs, inputs).work_at(n=size) == want, f"{label} at n={size}"
