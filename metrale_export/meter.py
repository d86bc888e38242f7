"""Wall time and peak resident memory of one step of a job, measured in the process itself.

The peak of a step is Linux's ``VmHWM`` (``/proc/self/status``) after resetting it at the step's
start (writing ``5`` to ``/proc/self/clear_refs``, Linux 4.0+). Where the reset cannot be written,
the peak is the process's so far (``resource.getrusage``'s ``ru_maxrss``), an upper bound of the
step's own, and ``peak_rss_scope`` says ``process`` instead of ``step``.

Invariants: measuring runs nothing extra (no thread, no sampling); a failure to read /proc only
narrows what is reported, never fails the step.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _reset_peak() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def _vm_hwm() -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _ru_maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


class StepMeter:
    """``with StepMeter() as m: ...`` then ``m.as_json()``: the block's wall time and peak RSS."""

    def __enter__(self) -> "StepMeter":
        self.scope = "step" if _reset_peak() and _vm_hwm() is not None else "process"
        self.started = time.perf_counter()
        self.seconds = None
        self.peak = None
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.started
        hwm = _vm_hwm() if self.scope == "step" else None
        self.peak = hwm if hwm is not None else _ru_maxrss()
        if hwm is None:
            self.scope = "process"

    def as_json(self) -> dict:
        return {"wall_seconds": round(self.seconds, 2), "peak_rss_bytes": self.peak, "peak_rss_scope": self.scope}

    def describe(self) -> str:
        peak = f"{self.peak / 2**30:.2f} GiB" + ("" if self.scope == "step" else " (process peak so far)")
        return f"{self.seconds:.1f} s, peak RSS {peak}"
