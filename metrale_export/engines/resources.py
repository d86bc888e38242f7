"""What a build needs of the machine (peak memory, disk, time), and the refusal when the machine has less.

``estimate_build`` is a pure function of the plan's facts (engine weights mode, source weight
bytes, the largest projection, how many engines and lowered graphs); its coefficients are measured
(docs/engines.md, "Memory and disk"; benchmarks/results/engines8b-*.md). ``check`` compares the
estimate with what the machine has: available memory from ``/proc/meminfo`` (``MemAvailable``) or
psutil, free disk under the engine directory, each overridable by an environment variable
(``METRALE_AVAILABLE_MEMORY``, ``METRALE_AVAILABLE_DISK``: bytes, or with a K/M/G/T suffix), and
raises ``ResourceError`` (exit 2) before anything is written. Where nothing says what is available,
nothing is refused.

``estimate_engine_seconds`` is how long one engine is expected to take, a pure function of its
lowered graph's node count, its optimization profiles and the backend; its coefficients are fitted
to measured builds (docs/engines.md, "How long a build takes"; benchmarks/bench_build_time.py).
``remaining_seconds`` scales what is left by how the engines built so far compared with theirs.

Invariants: one line per refusal, naming the estimate, its parts and what is available; no
TensorRT import.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Check, InputError

MEMORY_ENV = "METRALE_AVAILABLE_MEMORY"
DISK_ENV = "METRALE_AVAILABLE_DISK"

GiB = 1 << 30
# Measured (docs/engines.md, "Memory and disk"): the process with Python, onnx, Polygraphy and the
# backend imported; what lowering holds per element of the largest projection (unpacked codes,
# their INT4 copy, the packed tensor); TensorRT's builder per lowered weight byte when the engine
# holds the weights (the parsed weights, the engine's copy, the serialized plan), and without them
# (shared: kernels only, a fixed part per engine's graph).
BASE_BYTES = int(0.8 * GiB)
LOWERING_BYTES_PER_ELEMENT = 8
CHUNK_BYTES = 2 * (64 << 20)
BUILDER_BYTES_PER_WEIGHT_BYTE = {"embedded": 3.0, "stripped": 2.0, "shared": 0.0}
SHARED_BUILDER_BYTES = int(2.0 * GiB)
SHARED_ENGINE_BYTES = 64 << 20  # disk: an engine without weights (kernels, tactics)


class ResourceError(InputError):
    """The machine has less memory or disk than the build needs (exit 2, before anything is built)."""


@dataclass(frozen=True)
class Estimate:
    """Peak memory (bytes, the process's resident set) and disk (bytes written) of a build."""

    memory: int
    disk: int
    parts: dict = field(default_factory=dict)  # part -> bytes, for the refusal's line

    def describe(self) -> str:
        return ", ".join(f"{k} {v / GiB:.1f} GiB" for k, v in self.parts.items())


def estimate_build(engine_weights: str, backend: str, weight_bytes: int, largest_op_weights: int,
                   engines: int, graphs: int) -> Estimate:
    """The peak memory and disk of building ``engines`` engines from ``graphs`` lowered graphs of
    a source whose weights take ``weight_bytes``. The lowering and the builder run one after the
    other, so the peak is the larger of the two; the weights file is written once per graph."""
    lowering = BASE_BYTES + LOWERING_BYTES_PER_ELEMENT * largest_op_weights + CHUNK_BYTES
    builder = BASE_BYTES + int(BUILDER_BYTES_PER_WEIGHT_BYTE.get(engine_weights, 3.0) * weight_bytes)
    if engine_weights == "shared":
        builder += SHARED_BUILDER_BYTES
    return Estimate(memory=max(lowering, builder), disk=build_disk(engine_weights, weight_bytes, engines, graphs),
                    parts={"lowering": lowering, f"{backend} builder": builder})


def build_disk(engine_weights: str, weight_bytes: int, engines: int, graphs: int) -> int:
    """The bytes a build writes: each lowered graph's weights file, and each engine (its kernels,
    and its weights where it embeds them). The main job's up-front space check counts the same
    (``exporter.writer.output_bytes``)."""
    per_engine = SHARED_ENGINE_BYTES + (weight_bytes if engine_weights == "embedded" else 0)
    return graphs * weight_bytes + engines * per_engine


def parse_bytes(text: str, where: str) -> int:
    """``12345``, ``16G``, ``512M``, ``1.5T`` -> bytes (binary units)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in "KMGT" and t[-1:] else t
    try:
        value = float(number) * scale
    except ValueError:
        raise InputError(f"{where}={text!r}: expected bytes, optionally with K, M, G or T (16G)") from None
    return int(value)


def available_memory() -> tuple[int | None, str]:
    """Bytes of memory this build may use, and where the number comes from."""
    if os.environ.get(MEMORY_ENV):
        return parse_bytes(os.environ[MEMORY_ENV], MEMORY_ENV), MEMORY_ENV
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except OSError:
        pass
    try:
        import psutil
    except ImportError:
        return None, "unknown"
    return int(psutil.virtual_memory().available), "psutil"


def available_disk(where: Path) -> tuple[int | None, str]:
    """Free bytes on the file system of ``where`` (its nearest existing parent)."""
    if os.environ.get(DISK_ENV):
        return parse_bytes(os.environ[DISK_ENV], DISK_ENV), DISK_ENV
    p = Path(where).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free, f"free on {p}"
    except OSError:
        return None, "unknown"


def machine_check(estimate: Estimate, memory: tuple[int | None, str], disk: tuple[int | None, str]) -> Check:
    """Whether the machine can hold the build: the memory's reason and the disk's, each that applies
    (pure: numbers in, words out)."""
    (mem, mem_from), (free, disk_from) = memory, disk
    return Check.of([
        f"building these engines needs about {estimate.memory / GiB:.1f} GiB of memory at its peak "
        f"({estimate.describe()}) and {mem / GiB:.1f} GiB is available ({mem_from}); free memory, build "
        f"fewer --profiles at a time, or set {MEMORY_ENV} if the figure is wrong"
        if mem is not None and estimate.memory > mem else None,
        f"building these engines writes about {estimate.disk / GiB:.1f} GiB and {free / GiB:.1f} GiB is "
        f"free ({disk_from}); free space or choose another -o" if free is not None and estimate.disk > free else None,
    ])


def check(estimate: Estimate | None, out_dir: Path) -> None:
    """Raise ``ResourceError`` at ``out_dir`` when this machine cannot hold ``estimate`` (None:
    nothing to build), with every reason on one line."""
    if estimate is None:
        return
    fits = machine_check(estimate, available_memory(), available_disk(out_dir))
    if not fits.ok:
        raise ResourceError(f"{out_dir}: {fits.message}")


# How long an engine takes to build (docs/engines.md, "How long a build takes"): a fixed part, and
# per optimization profile (TensorRT-RTX compiles the whole graph for each) a part that grows as
# the lowered graph's node count to the power 1.5. Fitted to TensorRT-RTX 1.7 building 14
# demo-shaped checkpoints of 2 to 30 layers (410 to 5,534 nodes; dense, MoE, hybrid; every weight
# format) on a 2-core machine at load 4-8 (benchmarks/bench_build_time.py;
# benchmarks/results/build-time-*.json): every build's total within 2.1x of its estimate.
# TensorRT's builder on a GPU was not measured here and gets the same coefficients.
ENGINE_SECONDS = {"tensorrt-rtx": 0.45, "tensorrt": 0.45}
PROFILE_SECONDS_AT_1000_NODES = {"tensorrt-rtx": 2.33, "tensorrt": 2.33}
NODE_EXPONENT = 1.5
TIME_ESTIMATE_FACTOR = 2.1  # every calibration build's measured/estimated total lies within 1/2.1..2.1


def estimate_engine_seconds(backend: str, nodes: int, profiles: int) -> float:
    """The seconds one engine of ``profiles`` optimization profiles over a lowered graph of
    ``nodes`` nodes is expected to take to build with ``backend``."""
    per_profile = PROFILE_SECONDS_AT_1000_NODES.get(backend, PROFILE_SECONDS_AT_1000_NODES["tensorrt-rtx"])
    return ENGINE_SECONDS.get(backend, ENGINE_SECONDS["tensorrt-rtx"]) + \
        profiles * per_profile * (nodes / 1000) ** NODE_EXPONENT


def remaining_seconds(expected_left: float, seconds_done: float, expected_done: float) -> float:
    """What the engines still to build should take: their estimate, scaled by how the engines built
    so far compared with theirs (a loaded or a faster machine moves both alike)."""
    if expected_done <= 0 or seconds_done <= 0:
        return expected_left
    return expected_left * seconds_done / expected_done


def describe_seconds(seconds: float) -> str:
    """``7 s``, ``95 s``, ``18 min``, ``1.5 h``: how a time is shown in the build's lines."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
