"""Wall time and peak RSS of ``metrale-export compare`` on given exports, as a markdown table.

    python -m benchmarks.bench_compare LABEL=EXPORT_DIR [LABEL=EXPORT_DIR ...] [--out FILE.md]

Each export is compared in a child process under ``/usr/bin/time -v`` (wall clock, maximum resident
set size), with ``--json`` so the checks come back too: op and layer checks, the verdict, the
logits' relative error and top-1 agreement, and how it ran (streamed, segments, the most decoder
layers resident at once). Run it under ``flock /work/locks/bigmem`` on the shared machine. The
exports are made beforehand, e.g. an 8B-shaped one with ``benchmarks.bench_export.write_checkpoint``
and ``metrale-export export CKPT -o DIR --weight-quantization w4a16``. The table names the commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(export_dir: Path) -> dict:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "metrale_export.cli.main", "compare", str(export_dir),
           "--json"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return parse(r.returncode, r.stdout, r.stderr)


def parse(returncode: int, stdout: str, time_text: str) -> dict:
    """The row of one run: ``time -v``'s wall clock and peak RSS, and the report's numbers."""
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", time_text).group(1)
    seconds = 0.0
    for part in wall.split(":"):
        seconds = seconds * 60 + float(part)
    rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_text).group(1))
    cpu = sum(float(re.search(rf"{k} time \(seconds\): (\S+)", time_text).group(1)) for k in ("User", "System"))
    row = {"exit": returncode, "wall_s": seconds, "cpu_s": cpu, "peak_rss_gib": rss_kib / 2**20}
    try:
        report = json.loads(stdout[stdout.index("{"): stdout.rindex("}") + 1])
    except ValueError:
        return row | {"error": time_text.strip().splitlines()[-1] if time_text.strip() else "no report"}
    logits = [r for r in report["rows"] if r["output"] == "logits"]
    row.update(ok=report["ok"], ops=len(report["ops"]), layers=len(report["layers"]),
               ops_ok=all(o["ok"] for o in report["ops"]), layers_ok=all(o["ok"] for o in report["layers"]),
               logits_rel=max(r["rel_error"] for r in logits), top1=min(r["top1"] for r in logits),
               run=report.get("run", {}))
    return row


def table(rows: dict[str, dict], commit: str) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()
    lines = [f"# compare: wall time and peak RSS ({when}, commit {commit})", "",
             f"Machine: {os.cpu_count()} cores, load average {load[0]:.1f} at the end; "
             "`/usr/bin/time -v` of `metrale-export compare DIR --json` (benchmarks/bench_compare.py).", "",
             "| export | wall | CPU (user + sys) | peak RSS | op checks | layer checks | verdict | logits rel. error "
             "| top-1 | run |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for label, r in rows.items():
        if "ops" not in r:
            lines.append(f"| {label} | {r['wall_s']:.0f} s | {r['cpu_s']:.0f} s | {r['peak_rss_gib']:.2f} GiB | - | - | "
                         f"exit {r['exit']}: {r.get('error', '')} | | | |")
            continue
        run = r["run"]
        how = f"{run.get('mode', '?')}, {run.get('segments', '?')} segments, " \
              f"{run.get('resident_layers_peak', '?')} layers resident at most"
        lines.append(f"| {label} | {r['wall_s']:.0f} s ({r['wall_s'] / 60:.1f} min) | {r['cpu_s']:.0f} s | "
                     f"{r['peak_rss_gib']:.2f} GiB | "
                     f"{r['ops']} {'within' if r['ops_ok'] else 'NOT within'} | "
                     f"{r['layers']} {'within' if r['layers_ok'] else 'NOT within'} | "
                     f"{'ok' if r['ok'] else 'FAILED'} (exit {r['exit']}) | {r['logits_rel']:.2e} | "
                     f"{r['top1']:.3f} | {how} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("exports", nargs="*", metavar="LABEL=EXPORT_DIR")
    p.add_argument("--measured", action="append", default=[], metavar="LABEL=TIME_FILE,JSON_FILE",
                   help="A run made elsewhere (e.g. under flock): `time -v -o TIME_FILE` and its --json stdout.")
    p.add_argument("--out", type=Path, default=None, help="Also write the table to this file.")
    args = p.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    rows = {}
    for item in args.exports:
        label, _, path = item.partition("=")
        rows[label] = measure(Path(path))
        print(label, rows[label], file=sys.stderr, flush=True)
    for item in args.measured:
        label, _, files = item.partition("=")
        time_file, json_file = files.split(",")
        text = Path(time_file).read_text()
        status = re.search(r"Exit status: (\d+)", text)
        rows[label] = parse(int(status.group(1)) if status else -1, Path(json_file).read_text(), text)
    text = table(rows, commit)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
