"""Static gates over the built kernels (no GPU): ptxas spills and C75xx warnings, and in the sm_90a
SASS of every kernel that issues wgmma, its steady-state consumer loop (the innermost loop that holds
HGMMA, or QGMMA / IGMMA: the FP8 / int8 forms) must hold no global load (LDG: WARPGROUP.ARRIVE waits
on every load in flight) and no `WARPGROUP.DEPBAR.LE gsb0, 0x0` (a drain of the tensor pipe in every
iteration). FP8 loops (QGMMA) may drain once per 4 QGMMA k32, one 128-k block: the promotion of the
block's result into float32 (plugins/common/projWgmmaFp8.cuh) reads it, and reading it while another
group is in flight makes ptxas serialize the wgmmas (C7514).

    python -m benchmarks.sass_gates [--build build/plugins] [--kernel REGEX] [--out FILE.md]

Reads the objects under BUILD/obj (`make -C plugins` writes them, each with its `.ptxas.log`) with
`cuobjdump -sass` (PATH, or $CUOBJDUMP; it needs nvdisasm beside it or on PATH). Prints one markdown
table row per kernel and exits 1 when any gate fails (2 when nothing could be read).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_WARN = re.compile(r"\b(C75\d\d)\b")  # ptxas writes them as "warning" or "info"
_WFUNC = re.compile(r"function '([^']+)'")
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);")
_GMMA = re.compile(r"\b[HQI]GMMA\b")
_BRA = re.compile(r"\bBRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))")


@dataclass
class Kernel:
    name: str
    regs: int = -1
    spill: int = 0
    warnings: list[str] = field(default_factory=list)
    hgmma: int = 0
    loop: tuple[int, int] | None = None  # byte offsets [start, end] of the steady-state loop
    loop_hgmma: int = 0
    loop_ldg: int = 0
    loop_drain: int = 0
    loop_qgmma: int = 0  # FP8 wgmma k32 in the loop: loop_qgmma // 4 promotion drains allowed

    def failures(self) -> list[str]:
        out = []
        if self.spill:
            out.append(f"spills {self.spill} B")
        out += [f"ptxas {w}" for w in sorted(set(self.warnings))]
        if self.loop_ldg:
            out.append(f"{self.loop_ldg} LDG in the wgmma loop")
        if self.loop_drain > self.loop_qgmma // 4:
            out.append(f"{self.loop_drain} DEPBAR.LE gsb0,0x0 in the wgmma loop")
        return out


def read_ptxas(log: Path, arch: str = "sm_90a") -> dict[str, Kernel]:
    """Per entry function compiled for ``arch``: registers, spill bytes, C75xx warnings."""
    kernels: dict[str, Kernel] = {}
    cur: Kernel | None = None
    pending: list[str] = []  # warnings come before the entry they belong to, or during it
    for line in log.read_text(errors="replace").splitlines():
        m = _ENTRY.search(line)
        if m:
            cur = kernels.setdefault(m.group(1), Kernel(m.group(1))) if m.group(2) == arch else None
            if cur is not None:
                cur.warnings += pending
            pending = []
            continue
        w = _WARN.search(line)
        if w:
            f = _WFUNC.search(line)  # ptxas names the function when it can (its code for which arch: not said)
            if f:
                kernels.setdefault(f.group(1), Kernel(f.group(1))).warnings.append(w.group(1))
            else:
                pending.append(w.group(1))
            continue
        if cur is None:
            continue
        s = _SPILL.search(line)
        if s:
            cur.spill += int(s.group(1)) + int(s.group(2))
        r = _REGS.search(line)
        if r:
            cur.regs = int(r.group(1))
    return kernels


def sass_functions(obj: Path, cuobjdump: str, arch: str = "sm_90a") -> dict[str, list[tuple[int, str]]]:
    """Function name -> [(byte offset, instruction text)] of the ``arch`` SASS in ``obj``."""
    text = subprocess.run([cuobjdump, "-sass", "-arch", arch, str(obj)], capture_output=True, text=True,
                          check=True).stdout
    funcs: dict[str, list[tuple[int, str]]] = {}
    cur = None
    for line in text.splitlines():
        if "Function :" in line:
            cur = funcs.setdefault(line.split("Function :", 1)[1].strip(), [])
            continue
        m = _INSTR.search(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2).strip()))
    return funcs


def steady_loop(instrs: list[tuple[int, str]]) -> tuple[int, int] | None:
    """The innermost loop (a backward branch's [target, branch]) that holds a wgmma."""
    hg = [off for off, ins in instrs if _GMMA.search(ins)]
    best = None
    for off, ins in instrs:
        m = _BRA.search(ins)
        if not m or m.group(1) is None:
            continue
        target = int(m.group(1), 16)
        if target <= off and any(target <= h <= off for h in hg):
            if best is None or off - target < best[1] - best[0]:
                best = (target, off)
    return best


def analyse(k: Kernel, instrs: list[tuple[int, str]]) -> None:
    k.hgmma = sum(bool(_GMMA.search(ins)) for _, ins in instrs)
    k.loop = steady_loop(instrs)
    if k.loop is None:
        return
    body = [ins for off, ins in instrs if k.loop[0] <= off <= k.loop[1]]
    k.loop_hgmma = sum(bool(_GMMA.search(i)) for i in body)
    k.loop_qgmma = sum(bool(re.search(r"\bQGMMA\b", i)) for i in body)
    k.loop_ldg = sum(bool(re.search(r"\bLDG\b", i)) for i in body)
    k.loop_drain = sum(bool(re.search(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x0\b", i)) for i in body)


def short(names: list[str]) -> dict[str, str]:
    """Mangled name -> a readable one (c++filt when it is there: template arguments kept, the
    parameter list and the namespace dropped)."""
    filt = shutil.which("c++filt")
    if not filt or not names:
        return {n: n for n in names}
    out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return {n: re.sub(r"^void |\(.*$", "", d).replace("metrale::", "") for n, d in zip(names, out)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "plugins")
    ap.add_argument("--kernel", default="", help="only kernels whose mangled name matches this regex")
    ap.add_argument("--out", type=Path, help="also write the table to this markdown file")
    args = ap.parse_args(argv)
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    objs = sorted((args.build / "obj").rglob("*.o"))
    if not objs or cuobjdump is None:
        print(f"sass_gates: no objects under {args.build / 'obj'} or no cuobjdump (PATH, $CUOBJDUMP); "
              f"build with make -C plugins first", file=sys.stderr)
        return 2
    rows, failed = [], 0
    for obj in objs:
        log = Path(str(obj) + ".ptxas.log")
        kernels = read_ptxas(log) if log.exists() else {}
        funcs = sass_functions(obj, cuobjdump)
        readable = short(list(funcs))
        for name, instrs in funcs.items():
            if args.kernel and not re.search(args.kernel, name):
                continue
            k = kernels.get(name, Kernel(name))
            analyse(k, instrs)
            bad = k.failures()
            failed += bool(bad)
            loop = f"{k.loop[1] - k.loop[0] + 16} B" if k.loop else "-"
            rows.append(f"| {obj.stem} | `{readable[name]}` | {k.regs} | {k.spill} | {k.hgmma} | {loop} | "
                        f"{k.loop_hgmma} | {k.loop_ldg} | {k.loop_drain} | {'FAIL: ' + '; '.join(bad) if bad else 'ok'} |")
    table = "\n".join(["| object | kernel (sm_90a) | regs | spill B | GMMA | wgmma loop | loop GMMA | "
                       "loop LDG | loop drains | gate |", "|---|---|---|---|---|---|---|---|---|---|", *rows])
    print(table)
    print(f"\n{failed} of {len(rows)} kernels fail a gate")
    if args.out:
        args.out.write_text(table + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
