"""The documentation: the guides build with warnings as errors (`make docs`), the README is
short and its examples run, no page carries the project's history, and the files a user of the
package expects are there."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = ("install", "getting_started", "language", "autodiff", "performance", "frameworks", "shipping",
          "visibility", "errors", "conventions", "internals", "api", "contract")


def _published_pages() -> list[pathlib.Path]:
    """The README, the changelog and the sources of the Sphinx site (not its build folder)."""
    docs = [p for p in sorted((ROOT / "docs").rglob("*")) if p.suffix in (".md", ".rst", ".py")
            and "_build" not in p.parts]
    return [README, ROOT / "CHANGELOG.md", *docs]


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


@pytest.mark.slow
def test_guides_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="an optional extra; make test requires it")
    pytest.importorskip("myst_parser", reason="an optional extra; make test requires it")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-E", "-b", "html",
                           str(ROOT / "docs"), str(tmp_path / "html")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    html = tmp_path / "html"
    api = (html / "api.html").read_text()
    for name in ("JacobianRecursive", "hessian_vector_product", "tensorad.Kernel.export", "tensorad.load",
                 "tensorad.config", "conv2d"):
        assert name in api, name
    for page in GUIDES:
        assert (html / f"{page}.html").is_file(), page
    assert "subgradient PyTorch returns" in (html / "conventions.html").read_text()
    assert "public API contract" in (html / "contract.html").read_text()
    assert "zero-free" in (html / "autodiff.html").read_text()
    assert "tune=True" in (html / "performance.html").read_text()
    # the developer logs stay out of the published site
    assert not (html / "audit.html").exists() and not (html / "performance_history.html").exists()


def test_developer_logs_live_outside_the_site():
    assert (ROOT / "dev" / "audit.md").is_file() and (ROOT / "dev" / "performance_history.md").is_file()
    for name in ("audit.md", "performance_history.md"):
        assert not (ROOT / "docs" / name).exists(), name


HISTORY = [
    (re.compile(r"\bsessions?\b", re.I), "a session"),
    (re.compile(r"\bcampaigns?\b", re.I), "a fuzz campaign"),
    (re.compile(r"\bseeds? \d|\bfuzz seeds?\b|\bthe seed's\b|\bseed 20\d\d\b", re.I), "a fuzz seed"),
    # 7 to 40 hex digits with at least one digit and one letter: an abbreviated or full hash
    (re.compile(r"(?<![\w/.#-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])"),
     "a commit hash"),
]


def test_no_history_in_the_readme_or_the_published_pages():
    found = []
    for path in _published_pages():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for pattern, what in HISTORY:
                m = pattern.search(line)
                if m:
                    found.append(f"{path.relative_to(ROOT)}:{n}: {what} ({m.group(0)!r})")
    assert not found, "\n".join(found)


def test_the_history_check_finds_what_it_looks_for():
    lines = ["Session 21 found it", "the campaign W", "fuzz seed 436242", "commit 0910b53 and 449b3b9"]
    for line, (pattern, _) in zip(lines, HISTORY):
        assert pattern.search(line), line
    for clean in ("rng = np.random.default_rng(0)", "work 6291456", "[0, 999]", "float32 ax0"):
        assert not any(p.search(clean) for p, _ in HISTORY), clean


def test_architecture_fits_its_page():
    """ARCHITECTURE.md shows the rooms and the forms between passes in at most 15,000 bytes."""
    size = len((ROOT / "ARCHITECTURE.md").read_bytes())
    assert size <= 15_000, size


def test_readme_is_short_and_starts_with_the_two_commands():
    text = README.read_text()
    assert len(text.encode()) <= 12 * 1024, len(text.encode())
    head = text[:text.index("\n## ")]
    assert "make bench" in head and "make test" in head
    for section in ("## Install", "## Five minutes", "## What you can write",
                    "## Training inside PyTorch and JAX", "## Speed", "## Limits", "## Learn more"):
        assert section in text, section


@pytest.mark.slow
def test_readme_examples_run(tmp_path):
    """Every Python block of the README runs as written: the first in tests/e2e/test_readme.py
    (in a namespace of its own, its values checked against NumPy), the others here, each in a
    fresh process."""
    blocks = _python_blocks(README.read_text())
    assert len(blocks) >= 2
    assert "ta.JacobianRecursive(" in blocks[0] and "ta.lower(" in blocks[0] and "ta.build(" in blocks[0]
    assert "@ta.torch.op" in blocks[1] and ".backward()" in blocks[1]
    for n, code in enumerate(blocks[1:], 1):
        script = tmp_path / f"readme_{n}.py"
        script.write_text(code)
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                              timeout=300)
        assert done.returncode == 0, f"README block {n}:\n{code}\n{done.stderr[-3000:]}"


def test_getting_started_runs_top_to_bottom(tmp_path):
    """The getting-started guide's blocks, in order, are one working script."""
    code = "\n".join(_python_blocks((ROOT / "docs" / "getting_started.md").read_text()))
    script = tmp_path / "getting_started.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_contract_license_and_type_marker_ship_with_the_package():
    readme = README.read_text()
    assert "`API.md`" in readme and (ROOT / "API.md").is_file()
    assert "Permission is hereby granted" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "tensorad" / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["tensorad"]
    test_extra = " ".join(config["project"]["optional-dependencies"]["test"])
    for tool in ("sphinx", "myst-parser", "matplotlib"):
        assert tool in test_extra


def test_readme_says_how_to_install():
    readme = README.read_text()
    install = readme[readme.index("## Install"):]
    install = install[:install.index("\n## ", 5)]
    for text in ("pip install tensorad", "pip install .", "[torch]", "[jax]", "[bench]", "[test]"):
        assert text in install, text
