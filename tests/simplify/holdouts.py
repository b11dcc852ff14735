"""What the holdouts of operators share (registered as the module ``holdouts`` by conftest.py): an
operator with its expert's count (:class:`Op`), float64 placeholders and reduction axes, and the bar
its gradient's work is held to (:func:`assert_within_the_bar`)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import tensorad as ta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import gradient_cost  # noqa: E402

F = "float64"
BAR = 1.25


@dataclass
class Op:
    output: ta.Tensor
    inputs: list
    formula: str
    hand_work: int
    ints: dict = field(default_factory=dict)  # integer placeholder -> (low, high) of its values
    positive: tuple = ()  # float inputs drawn in [0.5, 1.5) (a product's factors, a norm's weights)


def p(shape, name, dtype=F):
    return ta.placeholder(shape, dtype, name)


def r(n, name):
    return ta.reduce_axis((0, n), name)


def assert_within_the_bar(name: str, op: Op) -> None:
    """The gradient's work (on ``fuzz.cheap``'s pinned target) is at most ``BAR`` times the expert's
    count and within the cheap-gradient bound."""
    cost = gradient_cost(op.output, op.inputs)
    assert cost.backward <= BAR * op.hand_work, \
        f"{name}: work {cost.backward} > {BAR} x {op.hand_work} ({op.formula})"
    assert cost.holds, f"{name}: work {cost.backward} > the cheap-gradient bound {cost.bound}"
