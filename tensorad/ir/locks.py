"""Locks of the process that a fork waits for (:func:`process_lock`).

A forked child has only the forking thread, so a process lock (a build compiling, the JIT linking) that
another thread held at the fork would never be released there.  ``os.fork`` therefore takes every process
lock before it forks (a build under way finishes first) and releases it after, in parent and child."""

from __future__ import annotations

import logging  # noqa: F401  (imported first: its fork handler takes its lock after ours, as our holders do)
import os
import threading


def process_lock(reentrant: bool = False) -> threading.Lock | threading.RLock:
    """A new lock for the life of the process (a module's own, made once: the fork handlers keep it)."""
    lock = threading.RLock() if reentrant else threading.Lock()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=lock.acquire, after_in_parent=lock.release, after_in_child=lock.release)
    return lock
