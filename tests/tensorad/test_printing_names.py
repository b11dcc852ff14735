"""Printouts a user reads side by side agree: one name is one tensor in every printout of a
`tensorad show`, loop programs spell infinities `-inf`, the digit loops of a split axis are
named after that axis, and the HTML forms wrap long lines."""

from __future__ import annotations

import re
import textwrap

import tensorad as ta
from tensorad import cli

MLP = textwrap.dedent("""
    import tensorad as ta
    X = ta.placeholder((4, 6), name="X")
    W1 = ta.placeholder((5, 6), name="W1")
    W2 = ta.placeholder((3, 5), name="W2")
    Y = ta.topi.nn.dense(ta.topi.nn.relu(ta.topi.nn.dense(X, W1)), W2)
""")


def test_show_gives_each_tensor_one_name_in_printouts_and_loops(tmp_path, capsys):
    path = tmp_path / "mlp.py"
    path.write_text(MLP)
    assert cli.main(["show", f"{path}:Y"]) == 0
    out = capsys.readouterr().out
    shapes: dict[str, str] = {}
    # every place that states a tensor's shape: printout headers, kernel signatures, allocations
    found = re.findall(r"^tensor (\S+)\[\d+\] : (\w+) (\[[\d, ]*\])", out, re.M)
    found += re.findall(r"(?:allocate |[(,] )([\w.#]+): (\w+)(\[[\d, ]*\])", out)
    assert len(found) > 10
    for name, dtype, shape in found:
        shape = shape.replace(" ", "")
        assert shapes.setdefault(name, dtype + shape) == dtype + shape, (name, shapes[name], shape)
    assert shapes["dense"] == "float32[4,3]" and shapes["dense#2"] == "float32[4,5]"


def test_loop_programs_spell_infinity_plainly():
    x = ta.placeholder((3, 4), name="X")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((3,), lambda i: ta.max(x[i, k], axis=k), name="Y")
    text = str(ta.lower([y], [x]))
    assert "-inf" in text and "-inff" not in text
    x64 = ta.placeholder((3, 4), "float64", name="X")
    y64 = ta.compute((3,), lambda i: ta.max(x64[i, k], axis=k), name="Y")
    assert "float64(-inf)" in str(ta.lower([y64], [x64]))  # distinct text: it keys the kernel cache


def test_digit_loops_of_a_split_axis_are_named_after_the_axis():
    image = ta.placeholder((1, 2, 8, 8), name="I")
    # (an average pool: a max pool's gradient scatters from its winner, with no split axis)
    pool = ta.topi.nn.pool(image, (2, 2), (2, 2), [0, 0, 0, 0], "avg")
    head = ta.placeholder(pool.shape, name="H")
    (grad,) = ta.JacobianRecursive(pool, [image], head)
    text = str(ta.lower([grad], [image, head]))
    loops = re.findall(r"for (\S+) in", text)
    assert "ax2.r0" in loops and "ax3.r0" in loops, text
    assert not any(re.fullmatch(r"r[xy]\.\d+", v) for v in loops), loops


def test_html_forms_wrap_long_lines():
    x = ta.placeholder((4, 6), name="X")
    w = ta.placeholder((5, 6), name="W")
    y = ta.topi.nn.dense(x, w)
    for html in (ta.lower([y], [x, w])._repr_html_(), y._repr_html_()):
        assert "white-space:pre-wrap" in html and "overflow-wrap:anywhere" in html
