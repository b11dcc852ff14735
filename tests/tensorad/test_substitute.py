"""``substitute``'s direct walk (leaf keys, replacements free of keys) gives exactly what the
rule-driven ``rewrite`` gives: the same hash-consed node, for random expressions and mappings;
mappings outside that case (a replacement that contains a key, a key that is not a leaf) keep
``rewrite``'s transitive meaning."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

import tensorad as ta
from tensorad.ir.expr import var
from tensorad.ir.rewrite import rewrite, substitute

V = [var("i", 0, 4), var("j", 0, 5), var("k", 0, 3)]
A = ta.placeholder((8, 8), name="A")


def _expr(draw, depth: int, leaves=V):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(leaves + [ta.const(draw(st.integers(-3, 3)), "int32")]))
    a, b = _expr(draw, depth - 1, leaves), _expr(draw, depth - 1, leaves)
    return draw(st.sampled_from([a + b, a - b, a * 2, a // 3, a % 2, ta.maximum(a, b),
                                 ta.select(a < b, a, b)]))


@st.composite
def case(draw):
    root = _expr(draw, 4)
    body = A[root % 8, (root + V[0]) % 8] * A[V[1], V[2]]  # shared subtrees, reads, floats
    keys = draw(st.lists(st.sampled_from(V), unique=True, min_size=1))
    fresh = [var(f"n{k}", 0, 4) for k in range(3)]
    # replacements over fresh variables and the variables not substituted (no cycles)
    leaves = fresh + [v for v in V if v not in keys]
    mapping = {k: _expr(draw, 2, leaves) for k in keys}
    return body, mapping


@settings(max_examples=examples(50), deadline=None)
@given(case())
def test_substitute_is_the_rewrite(c):
    body, mapping = c
    assert substitute(body, mapping) is rewrite(body, lambda n: mapping.get(n))


def test_a_replacement_that_holds_a_key_is_substituted_again():
    i, j, k = V
    assert substitute(i + 1, {i: j * 2, j: k}) is k * 2 + 1


def test_a_key_that_is_not_a_leaf_is_matched_after_its_operands():
    i, j, _ = V
    read = A[i, j]
    assert substitute(read * 2.0, {read: ta.const(1.0), i: j}) is A[j, j] * 2.0


def test_a_cycle_of_leaf_keys_is_replaced_at_once():
    """A permutation of variables, or a variable replaced by an expression of itself, has no
    repeated-replacement meaning (it never ends); it is the simultaneous substitution, as when
    a producer is read, permuted, by a consumer over the same axis variables."""
    i, j, k = V
    assert substitute(i - 2 * j, {i: j, j: i}) is j - 2 * i
    assert substitute(A[i, j], {i: i + 1}) is A[i + 1, j]
    assert substitute(i + j + k, {i: j, j: k, k: i}) is j + k + i
    assert substitute(i + k, {i: i}) is i + k
