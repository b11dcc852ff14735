"""Regenerate the work gate's golden file, ``tests/golden/work.json``: the forward and gradient
work of every program of ``tests/golden/corpus.py`` for each pinned target.

Run from the repository root with the disk cache off (nothing stale is read)::

    TENSORAD_NO_DISK_CACHE=1 .venv/bin/python tools/golden_work.py [--check]

``--check`` writes nothing: it prints each rise, fall and missing count against the file and the programs that
break the cheap-gradient principle (``fuzz/cheap.py``), and exits 1 on a rise, a missing count or
a violation not allowed.  stderr gets each program's CPU seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _corpus():
    spec = importlib.util.spec_from_file_location("golden_corpus", os.path.join(ROOT, "tests", "golden",
                                                                                 "corpus.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["golden_corpus"] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Regenerate or check tests/golden/work.json.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; report rises, falls and cheap-gradient violations")
    check = parser.parse_args(argv).check
    from fuzz.cheap import violation

    C = _corpus()
    golden = C.read_golden() if check else {}
    counts, bad = {}, 0
    for entry in C.entries():
        t0 = time.process_time()
        m = C.measure(entry)
        counts[entry.name] = m.counts
        print(f"{entry.name}: {time.process_time() - t0:.2f} s", file=sys.stderr, flush=True)
        why = violation(entry.name, m.cost)
        if why:
            print("VIOLATION", why)
            bad += 1
        if check:
            rises, falls, missing = C.differences(golden, entry.name, m.counts)
            for line in rises + missing:
                print("RISE", line)
            for line in falls:
                print("fall", line)
            bad += len(rises) + len(missing)
    if not check:
        C.write_golden(counts)
        print(f"wrote {C.GOLDEN}: {len(counts)} programs x {len(C.TARGETS)} targets")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
