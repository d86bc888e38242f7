"""Summarize an Nsight Compute text report of stall reasons, one line a profiled kernel:

    python -m benchmarks.diagnostics.ncu_stalls ncu-stall.txt [--top 7]

The report is one such as benchmarks/results/ncu-stall-20261203-1957-fbd70be.txt (written by a
device_run.sh mode since removed; its ncu command is in git at fbd70be): ncu's sections printed as text
(SpeedOfLight, WarpStateStats, SchedulerStats) with the metrics
``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``, in blocks separated by lines
``== NAME=<variant>`` (METRALE_STREAM=ring, M=4096: device_run.sh ncufp8). Per kernel: the variant, the kernel's name, its duration (us), the
instructions issued a scheduler-cycle, the cycles between a warp's issued instructions (the sum of the
stall ratios) and the largest reasons, in cycles an issued instruction; the kernels in the order ncu
profiled them (benchmarks/diagnostics/ncu_decode.py's case order).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

_STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio\s+\S*\s+([\d.]+)")


def summarize(text: str, top: int = 7) -> list[str]:
    """One line a kernel of the report `text`."""
    lines, variant = [], "-"
    for part in re.split(r"(?m)^(== [A-Za-z_0-9]+=\S*)$", text):
        if re.match(r"== [A-Za-z_0-9]+=", part):
            variant = part.rsplit("=", 1)[-1]
            continue
        for block in re.split(r"\n  (?=void |[A-Za-z_]\w*Kernel\b)", part)[1:]:
            name = block.split("(", 1)[0].replace("void ", "").strip()
            dur = re.search(r"Duration\s+us\s+([\d.]+)", block)
            ipc = re.search(r"Issued Warp Per Scheduler\s+([\d.]+)", block)
            stalls = {m.group(1): float(m.group(2)) for m in _STALL.finditer(block)}
            if not stalls:
                continue
            worst = sorted(stalls.items(), key=lambda kv: -kv[1])[:top]
            lines.append(f"{variant} | {name} | {dur.group(1) if dur else '-'} us | ipc "
                         f"{ipc.group(1) if ipc else '-'} | {sum(stalls.values()):.1f} cycles | "
                         + ", ".join(f"{k} {v:.2f}" for k, v in worst))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path)
    ap.add_argument("--top", type=int, default=7)
    args = ap.parse_args(argv)
    print("\n".join(summarize(args.report.read_text(), args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
