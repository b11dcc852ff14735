"""The sources say what and why, not when: no comment, docstring, test name or test file name
in the code and its tests cites the work's history (which fuzz run found a case, which
request asked for it, a commit)."""

from __future__ import annotations

import io
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = ("codegen", "simplify", "tensorad", "tests", "fuzz", "benchmarks", "tools", "examples")

HISTORY = [
    (re.compile(r"\bsessions?\b", re.I), "a session"),
    (re.compile(r"\bcampaigns?\b", re.I), "a fuzz campaign"),
    (re.compile(r"\bfuzz(?:ing)? seeds?\b|\bseeds? \d{3,}|\bseed \d+'s\b", re.I), "a fuzz seed"),
    (re.compile(r"\bissues? #?\d+", re.I), "an issue number"),
    # 7 to 40 hex digits with at least one digit and one letter: an abbreviated or full hash
    (re.compile(r"(?<![\w/.#-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])"),
     "a commit hash"),
]
# a test's or a test file's name
NAMED = re.compile(r"sessions?_?\d*|(?:seeds?|fuzz)_?\d{3,}|issues?_?\d+|campaigns?", re.I)

def _sources() -> list[pathlib.Path]:
    return [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]


def _prose(text: str) -> list[tuple[int, str]]:
    """The comments and the docstrings (a string that is a statement of its own) of a module,
    each with the number of the line each of its lines is on."""
    out = []
    before = tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and before in (
                tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL)):
            out += [(tok.start[0] + k, line) for k, line in enumerate(tok.string.splitlines())]
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            before = tok.type
    return out


def _test_names(text: str) -> list[tuple[int, str]]:
    return [(n, m.group(1)) for n, line in enumerate(text.splitlines(), 1)
            for m in [re.match(r"\s*(?:async\s+)?def\s+(test\w*)", line)] if m]


def _findings(path: pathlib.Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text()
    found = []
    # (the prose is a part of the text: a text no pattern matches is not tokenized)
    for n, line in _prose(text) if any(p.search(text) for p, _ in HISTORY) else ():
        for pattern, what in HISTORY:
            m = pattern.search(line)
            if m:
                found.append(f"{rel}:{n}: {what} ({m.group(0)!r})")
    if rel.startswith("tests/"):
        for n, name in _test_names(text):
            if NAMED.search(name):
                found.append(f"{rel}:{n}: a test named after its history ({name})")
        if NAMED.search(path.name):
            found.append(f"{rel}: a test file named after its history")
    return found


def test_no_history_in_comments_docstrings_or_test_names():
    found = [f for p in _sources() for f in _findings(p)]
    assert not found, "\n".join(found)



def test_the_history_check_finds_what_it_looks_for():
    # (the probes are assembled from their marker words: this file holds no history itself)
    session, campaign, fuzz_seed, issue, commit, seed = (
        "Sess" + "ion 21", "camp" + "aign W", "fuzz se" + "ed 436242", "iss" + "ue 8",
        "com" + "mit " + "0910b53", "se" + "ed 224270")
    text = (f'"""Found in {session}."""\n'
            f"x = 1  # the {campaign}\n"
            "def f():\n"
            f'    """{fuzz_seed}: the guard."""\n'
            f"    # asked for in {issue}\n"
            f"    return 0  # {commit}\n"
            f"# {seed}'s domain\n")
    prose = [line for _, line in _prose(text)]
    for line, (pattern, _) in zip(prose, HISTORY):
        assert pattern.search(line), line
    assert HISTORY[2][0].search(prose[-1])
    code = ('rng = np.random.default_rng(982368)\nname = "session"\nwork = 6291456  # work 6291456\n'
            'def g():\n    """The seed draws a program; a kernel of float32 [0, 999]."""\n'
            "    return f'{seed}'\n")
    assert not any(p.search(line) for _, line in _prose(code) for p, _ in HISTORY)
    assert NAMED.search("test_session22_checks") and NAMED.search("test_seed_910218_parallel")
    assert NAMED.search("test_fuzz_224270_scatter")
    assert not NAMED.search("test_seeds_draw_the_same_programs")
