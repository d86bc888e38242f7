"""Ctrl-C during a TensorRT build, and the builder's own progress.

TensorRT builds in C++ and calls back into Python (its logger, the progress monitor). Python's
default SIGINT handler raises KeyboardInterrupt inside such a callback, where TensorRT catches and
logs it and builds on; the process then exits 0 with an engine nobody asked for. So while a build
runs, SIGINT only sets a flag (``sigint_cancels``), the ``IProgressMonitor`` (``monitor``) answers
the builder's next ``step_complete`` with False, which cancels the build, and ``raise_if_set``
turns the flag back into KeyboardInterrupt once the builder has returned.

Invariants: the previous SIGINT handler is restored on exit; outside the main thread (where no
signal handler can be set) or where SIGINT is ignored nothing changes; a second Ctrl-C while a
cancelled build winds down is ignored (the first one already stops it).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


class Stop:
    """Set by SIGINT during a build."""

    def __init__(self):
        self.requested = False

    def raise_if_set(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


@contextlib.contextmanager
def sigint_cancels() -> Iterator[Stop]:
    stop = Stop()
    old = signal.getsignal(signal.SIGINT)
    active = threading.current_thread() is threading.main_thread() and old not in (signal.SIG_IGN, None)
    if active:
        signal.signal(signal.SIGINT, lambda *_: setattr(stop, "requested", True))
    try:
        yield stop
    finally:
        if active:
            signal.signal(signal.SIGINT, old)


def monitor(trt_module, stop: Stop, on_phase: Callable[[str, int], None] | None = None):
    """An ``IProgressMonitor`` of ``trt_module`` (tensorrt or tensorrt_rtx) that cancels the build
    once ``stop`` is set and reports the builder's top-level phases as ``on_phase(name, steps)``."""

    class _Monitor(trt_module.IProgressMonitor):
        def __init__(self):
            trt_module.IProgressMonitor.__init__(self)
            self.depth: dict[str, int] = {}

        def phase_start(self, phase_name, parent_phase, num_steps):
            depth = 0 if parent_phase is None else self.depth.get(parent_phase, 0) + 1
            self.depth[phase_name] = depth
            if on_phase is not None and depth <= 1:  # 'Building engine' and its direct phases
                on_phase(phase_name, num_steps)

        def step_complete(self, phase_name, step):
            return not stop.requested

        def phase_finish(self, phase_name):
            pass

    return _Monitor()
