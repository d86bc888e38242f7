"""Memory after each segment of a streamed compare: anonymous RSS and glibc's heap (mallinfo2: the
arena, what is in use, what is free in it). TRIM=1: malloc_trim(0) before each reading; COUNT=1: also
the live torch tensors and numpy arrays the garbage collector sees.

    PYTHONPATH=. python benchmarks/diagnostics/compare_segment_memory.py EXPORT_DIR
"""
import ctypes, gc, os, sys, time
from pathlib import Path
import numpy as np, torch
from metrale_export.compare.accuracy import compare_export

libc = ctypes.CDLL("libc.so.6")
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = MI2
TRIM = os.environ.get("TRIM") == "1"

def status():
    d = {}
    for line in open("/proc/self/status"):
        k, v = line.split(":", 1)
        if k in ("RssAnon", "VmRSS", "VmHWM"):
            d[k] = int(v.split()[0]) // 1024
    return d

class P:
    def start(self, total): self.t0 = time.time(); print("segments", total, flush=True)
    def update(self, name):
        if TRIM: libc.malloc_trim(0)
        m = libc.mallinfo2()
        s = status()
        nthr = len(os.listdir("/proc/self/task"))
        extra = ""
        if os.environ.get("COUNT") == "1":
            objs = gc.get_objects()
            nt = sum(1 for o in objs if isinstance(o, torch.Tensor))
            na = sum(1 for o in objs if isinstance(o, np.ndarray))
            extra = f" tensors={nt} arrays={na} objs={len(objs)}"
        print(f"{time.time()-self.t0:7.1f} {name:10s} anon={s['RssAnon']} rss={s['VmRSS']} "
              f"arena={m.arena>>20} inuse={m.uordblks>>20} free={m.fordblks>>20} mmap={m.hblkhd>>20} nmmap={m.hblks} thr={nthr}{extra}", flush=True)
    def close(self): pass

r = compare_export(Path(sys.argv[1]), progress=P())
print("ok", r.ok, r.run)
