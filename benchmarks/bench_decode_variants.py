"""The weight-streaming tier's variants (M <= 16) side by side, with the anchors and the copy bandwidth
measured in the same run (one GPU):

    python -m benchmarks.bench_decode_variants [--out DIR] [--m 1,8,16] [--variants default,reg,ring]

W4A16 (group 128) under each value of METRALE_STREAM (read by the launcher at each call: `ring` the
producer-fed shared-memory ring of plugins/common/projStreamRing.cuh at every M <= 16, anything else
the register ring of projStream.cuh; `default` leaves it unset: the ring at M <= 8 on long slices,
projStreamRing.cuh's streamRingFor), timed as benchmarks/bench_w4a16_variants.py times them, with each variant's TB/s
on the weight bytes, its fraction of the device-to-device copy bandwidth (issue 20's decode target:
>= 0.8) and whether its bits equal the first variant's. Writes decode-variants-YYYYMMDD-HHMM-<commit>.md.
"""

from __future__ import annotations

from .bench_kernels import copy_bandwidth
from .bench_w4a16_variants import bench as w4a16_bench
from .variants import main as variants_main

ENV = "METRALE_STREAM"


def bench(shapes, m_values, variants) -> list[str]:
    copy_tbs = copy_bandwidth()
    lines = [f"Copy bandwidth for the fractions: {copy_tbs:.2f} TB/s (read + write, this run).", ""]
    return lines + w4a16_bench(shapes, m_values, variants, env=ENV, copy_tbs=copy_tbs)


def main(argv=None) -> int:
    return variants_main(argv, doc=__doc__,
                         title="Streaming-tier variants (W4A16)", stem="decode-variants", env=ENV,
                         variants="reg,ring", bench=bench)


if __name__ == "__main__":
    raise SystemExit(main())
