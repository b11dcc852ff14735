"""A nest whose domain has divisions is not peeled (codegen/loops/isl_ast._product_axis).

The gradient of a random program had a 3-variable statement domain with two
nested floors (``17 floor((-7 - 6a - 6b) / 17) <= ...`` and a ``% 5`` of it).  Testing whether
its first variable could be a plain loop around isl's AST projected the other variables out,
and isl's hull and equality tests on the result did not finish in an hour; isl's AST builder
scans the whole domain in milliseconds.  The build runs in a child process with a limit of CPU
seconds, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import os

SCRIPT = r"""
from fuzz.checks import run_checks
from fuzz.program import generate
from fuzz.runner import job_for

job = job_for(generate(203056, forms=False), 203056)
job["checks"] = ["reverse"]
print(run_checks(job))
"""


def test_gradient_with_a_nested_floor_domain_builds(python_child):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = python_child(SCRIPT, 120, cwd=root, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'status': 'ok'" in out.stdout, out.stdout
