"""benchmarks/sass_gates.py reads ptxas logs and SASS as ptxas and cuobjdump write them (CPU)."""

from __future__ import annotations

from benchmarks import sass_gates as g

LOG = """ptxas warning : (C7510) a warning with no function
ptxas info    : (C7519) warpgroup.arrive is injected in around line 9 by compiler in function 'kB'
ptxas info    : Compiling entry function 'kA' for 'sm_90a'
    8 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 232 registers, used 1 barriers
ptxas info    : Compiling entry function 'kA' for 'sm_80'
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 99 registers
ptxas info    : Compiling entry function 'kB' for 'sm_90a'
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers
"""


def _sass(*lines):
    return [(16 * i, ins) for i, ins in enumerate(lines)]


def test_ptxas_log(tmp_path):
    (tmp_path / "x.log").write_text(LOG)
    k = g.read_ptxas(tmp_path / "x.log")
    assert k["kA"].regs == 232 and k["kA"].spill == 12 and k["kA"].warnings == ["C7510"]
    assert k["kB"].regs == 168 and k["kB"].failures() == ["ptxas C7519"]
    assert k["kA"].failures() == ["spills 12 B", "ptxas C7510"]


def test_the_innermost_wgmma_loop_is_gated():
    drains = _sass("MOV R1, R2", "HGMMA.64x128x16.F32.BF16 R24, R88, gdesc[UR4], R24, gsb0",
                   "LDG.E R3, desc[UR4][R4.64]", "WARPGROUP.DEPBAR.LE gsb0, 0x0",
                   "@P0 BRA 0x10", "LDG.E R5, desc[UR4][R4.64]", "EXIT")
    k = g.Kernel("k")
    g.analyse(k, drains)
    assert k.loop == (0x10, 0x40) and k.loop_hgmma == 1
    assert k.loop_ldg == 1 and k.loop_drain == 1  # the LDG after the loop is not counted
    deep = _sass("HGMMA.64x128x16.F32.BF16 R24, R88, gdesc[UR4], R24, gsb0",
                 "WARPGROUP.DEPBAR.LE gsb0, 0x1", "@P0 BRA 0x0", "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    k = g.Kernel("k")
    g.analyse(k, deep)
    assert k.failures() == [] and k.loop_hgmma == 1


def test_fp8_loops_may_drain_once_per_promoted_block():
    q = "QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR16], R24"
    block = _sass("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR9+0x38000], R26", "WARPGROUP.ARRIVE", q, q, q,
                  q + ", gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "FADD R131, R24, R131", "@P0 BRA 0x0", "EXIT")
    k = g.Kernel("k")
    g.analyse(k, block)
    assert k.hgmma == 4 and k.loop_hgmma == 4 and k.loop_qgmma == 4 and k.loop_drain == 1
    assert k.failures() == []  # one drain per 4 k32: the block's promotion
    twice = _sass(q, "WARPGROUP.DEPBAR.LE gsb0, 0x0", q, "WARPGROUP.DEPBAR.LE gsb0, 0x0", "@P0 BRA 0x0")
    k = g.Kernel("k")
    g.analyse(k, twice)
    assert k.failures() == ["2 DEPBAR.LE gsb0,0x0 in the wgmma loop"]
