"""A temporary larger than the program's arguments but no larger than a buffer it holds anyway.

A tensor larger than every input and output together was inlined into its readers whatever they
cost, so a growing batch turned the choice: a layer norm of an embedding (a checked gather) read
by a matrix product's weight gradient was stored at 64 sequences and inlined at 128, where the
product, whose packers cannot test a gather index, ran as loops recomputing the norm for every
column: a Transformer block's backward over 1000 sequences, static or over a symbolic batch (whose
256-row block did the same), took minutes a call where 64 took a fraction of a second.  The limit
now counts the buffers the program holds whatever it costs (a reduction's), which grow with the
batch alike: the temporaries per sequence are the same at every batch.
"""

from __future__ import annotations

import tensorad as ta


def _gradient(n: int) -> tuple[list, list]:
    V, T, D = 64, 8, 32
    E, W = ta.placeholder((V, D), name="E"), ta.placeholder((D, D), name="W")
    g, b = ta.placeholder((D,), name="g"), ta.placeholder((D,), name="b")
    tokens = ta.placeholder((n, T), "int32", "tokens")
    Y = ta.topi.matmul(ta.topi.nn.layer_norm(ta.topi.nn.embedding(E, tokens), g, b), W)
    return ta.JacobianRecursive(ta.topi.sum(Y * Y), [W]), [E, tokens, W, g, b]


def test_temporaries_per_row_are_the_same_at_every_batch():
    per_row = []
    for n in (4, 64):
        lowered = ta.lower(*_gradient(n))
        per_row.append(sorted((name, shape[1:] if shape[:1] == (n,) else shape)
                              for name, shape, _ in lowered.temporaries))
    assert per_row[0] == per_row[1]
