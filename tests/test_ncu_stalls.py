"""benchmarks/diagnostics/ncu_stalls.py reads Nsight Compute's text report as ncu 2025 prints it (CPU):
the committed report of the H200 run at 04af27e, and a two-kernel excerpt whose numbers are known."""

from __future__ import annotations

from pathlib import Path

from benchmarks.diagnostics import ncu_stalls

REPORT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "ncu-stall-20261203-1801-04af27e.txt"

EXCERPT = """== METRALE_STREAM=reg
[742] python3.12@127.0.0.1
  void projStreamKernel<W4A16Policy, 1, 2, 0>(T1::Params, const unsigned short *, void *, int) (256, 1, 1)x(256, 1, 1)
    Section: GPU Speed Of Light Throughput
    Duration                         us        18.69
    Issued Warp Per Scheduler                        0.47
    smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio   ratio   2.82
    smsp__average_warps_issue_stalled_wait_per_issue_active.ratio              ratio   1.83
== METRALE_STREAM=ring
  void projStreamRingKernel<W4A16Policy, 1, 8>(CUtensorMap_st, T1::Params) (256, 1, 1)x(288, 1, 1)
    Duration                         us        15.33
    Issued Warp Per Scheduler                        0.54
    smsp__average_warps_issue_stalled_wait_per_issue_active.ratio              ratio   1.51
    smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio   ratio   1.78
"""


def test_excerpt_gives_one_line_a_kernel_with_its_variant_and_largest_stalls():
    lines = ncu_stalls.summarize(EXCERPT, top=2)
    assert lines == [
        "reg | projStreamKernel<W4A16Policy, 1, 2, 0> | 18.69 us | ipc 0.47 | 4.7 cycles | long_scoreboard 2.82, wait 1.83",
        "ring | projStreamRingKernel<W4A16Policy, 1, 8> | 15.33 us | ipc 0.54 | 3.3 cycles | long_scoreboard 1.78, wait 1.51",
    ]


def test_the_committed_report():
    lines = ncu_stalls.summarize(REPORT.read_text(), top=1)
    assert len(lines) == 12  # 3 variants x (8B-down, 8B-up) x (W4A16, W4A4)
    assert [ln.split(" | ")[0] for ln in lines] == ["reg"] * 4 + ["ring"] * 4 + ["xl1"] * 4
    assert lines[0].startswith("reg | projStreamKernel<W4A16Policy, 1, 2, 0> | 18.69 us | ipc 0.47 | 8.1 cycles")


def test_blocks_of_any_name():
    """device_run.sh ncufp8 labels its blocks `== M=<m>`: the label's value is the line's first column."""
    text = EXCERPT.replace("== METRALE_STREAM=reg", "== M=256").replace("== METRALE_STREAM=ring", "== M=4096")
    assert [ln.split(" | ")[0] for ln in ncu_stalls.summarize(text, top=1)] == ["256", "4096"]
