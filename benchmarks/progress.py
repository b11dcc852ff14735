"""A dependency-free progress bar on stderr.

On a terminal the bar redraws in place; when stderr is a file or a pipe (CI logs, the smoke
test) each step is one short line, so the log stays readable.
"""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, stream=None, width: int = 24) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.start = time.perf_counter()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def step(self, what: str) -> None:
        """Announce the item about to run (the bar shows the items finished so far)."""
        filled = int(self.width * self.done / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.start
        line = f"{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.0f}s  {what}"
        if self.tty:
            self.stream.write("\r" + line[:118].ljust(118))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.done += 1

    def close(self) -> None:
        elapsed = time.perf_counter() - self.start
        line = f"{self.label} [{'#' * self.width}] {self.total}/{self.total} {elapsed:5.0f}s  done"
        self.stream.write(("\r" + line.ljust(118) + "\n") if self.tty else line + "\n")
        self.stream.flush()
