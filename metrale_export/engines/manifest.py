"""The engine directory's ``manifest.json``: written by the build, read by the build (what can be
reused) and by runners (``select``, ``compare``). One module, so the writer and its readers agree.

Invariants:
- the manifest (and every engine) is written to a temporary file in the same directory and
  renamed, so a reader never sees half a file;
- ``complete`` is false while a build runs: a rerun still reuses every entry listed;
- ``load`` checks ``manifest_version`` and the fields runners use; ``previous_engines`` never
  fails (an unreadable manifest only means that nothing can be reused).
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..errors import InputError, OutputLocationError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
ENGINE_FIELDS = ("rows", "file", "optimization_profiles", "formats")  # what runners rely on


def write_atomic(path: Path, data: bytes | memoryview) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if e.filename is None:  # write() errors (a full disk) carry no path: name the file
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def previous_engines(out_dir: Path) -> list[dict]:
    """The engine entries of the directory's manifest, or [] when it is absent or unreadable."""
    path = Path(out_dir) / MANIFEST
    if not path.is_file():
        return []
    try:
        old = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return []
    if not isinstance(old, dict) or old.get("manifest_version") != MANIFEST_VERSION:
        return []
    return [e for e in old.get("engines", []) if isinstance(e, dict)]


def read_if_any(out_dir: Path) -> object | None:
    """The parsed ``manifest.json`` of ``out_dir`` whatever wrote it; None where it is absent or unreadable."""
    try:
        return json.loads((Path(out_dir) / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def is_engine_manifest(doc: object) -> bool:
    """Whether a parsed manifest is one this module writes (not an export's or another tool's)."""
    return isinstance(doc, dict) and "engines" in doc and "manifest_version" in doc


def check_engine_dir(out_dir: Path) -> None:
    """Refuse an engine directory whose ``manifest.json`` is not an engine manifest (an export's,
    when ``-o`` names the export itself, or another tool's): the build would overwrite it."""
    if not (Path(out_dir) / MANIFEST).is_file():
        return
    found = read_if_any(out_dir)
    if is_engine_manifest(found):
        return
    what = "an export's" if isinstance(found, dict) and "format_version" in found else "not an engine manifest"
    raise OutputLocationError(
        f"{out_dir}: its {MANIFEST} is {what}, and building engines here would overwrite it; choose "
        f"another -o (default: engines/ beside the ONNX file)")


def load(engine_dir: Path) -> dict:
    """The manifest of a build directory, checked for the fields the runners use."""
    path = Path(engine_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no engine manifest (run metrale-export build first)") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(manifest, dict) or manifest.get("manifest_version") != MANIFEST_VERSION:
        found = manifest.get("manifest_version") if isinstance(manifest, dict) else None
        raise InputError(
            f"{path}: expected manifest_version {MANIFEST_VERSION}, found {found!r}; rebuild the engines"
        )
    for i, entry in enumerate(manifest.get("engines", [])):
        for name in ENGINE_FIELDS:
            if name not in entry:
                raise InputError(f"{path}: engines[{i}] has no {name!r}")
    return manifest


def engine_entry(plan, step, data: memoryview, seconds: float, numbers: dict, expected: float | None = None) -> dict:
    """The manifest entry of an engine just built from ``step`` of ``plan`` in ``seconds`` (``expected``:
    what the estimate said before); ``numbers`` are its lowered graph's (``weights.numbers``: weight
    bytes, decode bytes per token, state bytes; ``nodes``)."""
    return {
        "rows": {"lo": step.rows.lo, "hi": step.rows.hi}, "label": step.rows.label, "file": step.file,
        "bytes": data.nbytes, "sha256": hashlib.sha256(data).hexdigest(), "onnx": step.graph,
        "optimization_profiles": [s.as_json() for s in step.shapes], "formats": step.formats,
        "backend": _backend(plan), "lowering": plan.lowering, "plugin_sha256": plan.plugin_sha,
        "build_seconds": round(seconds, 3),
        "expected_build_seconds": None if expected is None else round(expected, 1),
        "lowered_nodes": numbers.get("nodes"),
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "key": step.key,
        "weights": numbers["weights"], "decode_bytes_per_token": numbers["decode_bytes_per_token"],
        "kv_cache_bytes_per_position": numbers["kv_cache_bytes_per_position"],
        "fixed_state_bytes": numbers["fixed_state_bytes"],
        "bf16_float_weights": numbers["bf16_float_weights"],
        "engine_weights": plan.engine_weights, "weights_file": numbers.get("weights_file"),
        "weight_inputs": numbers.get("weight_inputs", 0),
    }


def weights_files(entries: list[dict]) -> list[dict]:
    """The weights files the engines use, once each (``file`` relative to the engine directory,
    ``graph``: the lowered ONNX header that names each tensor's offset, ``bytes``, ``sha256``)."""
    out = {}
    for e in entries:
        w = e.get("weights_file")
        if isinstance(w, dict) and w.get("file") and w["file"] not in out:
            out[w["file"]] = {"file": w["file"], "graph": e.get("onnx"), "bytes": w.get("bytes"),
                              "sha256": w.get("sha256"), "tensors": w.get("tensors")}
    return list(out.values())


def summary(entries: list[dict]) -> dict:
    """What a user deploys: the engines' bytes in all, and per decode token (batch 1) the bytes the
    largest of them reads (the engines share one graph's weights unless ``adaptive``)."""
    sized = [e for e in entries if "decode_bytes_per_token" in e]
    engine_bytes = sum(int(e.get("bytes", 0)) for e in entries)
    weights = sum(int(w.get("bytes") or 0) for w in weights_files(entries))
    return {
        "engine_bytes": engine_bytes,
        "weights_file_bytes": weights,
        "total_bytes": engine_bytes + weights,
        "largest_engine_bytes": max((int(e.get("bytes", 0)) for e in entries), default=0),
        "weight_bytes": max((e["weights"]["bytes"] for e in sized), default=None),
        **{key: max((e[key] for e in sized), default=None) for key in _LARGEST_OF},
    }


# The numbers of an engine entry whose largest ``summary`` reports as they are named there.
_LARGEST_OF = ("decode_bytes_per_token", "kv_cache_bytes_per_position", "fixed_state_bytes")


def build_time(entries: list[dict]) -> dict:
    """The seconds the listed engines took to build and what the estimate said before each (an
    entry keeps both when a rerun reuses it, so a rerun that reuses every engine writes the same
    manifest); ``estimated`` counts the engines that carry an estimate."""
    timed = [e for e in entries if isinstance(e.get("build_seconds"), (int, float))]
    with_estimate = [e for e in timed if isinstance(e.get("expected_build_seconds"), (int, float))]
    return {"seconds": round(sum(e["build_seconds"] for e in timed), 3),
            "expected_seconds": round(sum(e["expected_build_seconds"] for e in with_estimate), 1),
            "estimated": len(with_estimate)}


def _backend(plan) -> dict:
    return {"name": plan.backend, "version": plan.backend_version, "targets": list(plan.targets)}


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def describe_size(manifest: dict) -> str:
    """One line for a build summary: engine bytes, weight dtype choice, decode reads per token."""
    size = manifest.get("size") or {}
    words = f"{_mib(size.get('engine_bytes', 0))} of engines"
    if size.get("weights_file_bytes"):
        how = {"shared": "bound as engine inputs", "stripped": "refitted into each engine"}.get(
            manifest.get("engine_weights"), "")
        words += f" + {_mib(size['weights_file_bytes'])} weights file" + (f" ({how})" if how else "")
    if size.get("weight_bytes") is not None:
        fw = "bf16 where the checkpoint is" if manifest.get("float_weights") == "checkpoint" else "float32"
        words += (f" (weights {_mib(size['weight_bytes'])}, float weights {fw}); a decode token reads "
                  f"{_mib(size['decode_bytes_per_token'])} of weights at batch 1")
        if size.get("kv_cache_bytes_per_position"):
            words += f" + {size['kv_cache_bytes_per_position'] / 1024:.1f} KiB of KV cache per context position"
        if size.get("fixed_state_bytes"):
            words += f" + {size['fixed_state_bytes'] / 1024:.1f} KiB of fixed state"
    return words


def document(plan, entries: list[dict], complete: bool) -> dict:
    """The manifest of ``plan`` listing ``entries``."""
    source = plan.source
    return {
        "manifest_version": MANIFEST_VERSION,
        "tool": f"metrale-export {__version__}",
        "complete": complete,  # False while building: a rerun still skips what is listed
        "source": {"path": str(source.onnx_path), "sha256": source.sha256,
                   "files": [str(p) for p in source.files]},
        "model": (source.export_manifest or {}).get("model"),
        "backend": _backend(plan),
        "lowering": plan.lowering,
        "activation_quantization": plan.policy,
        "row_invariance": plan.row_invariance,
        "max_context": plan.max_context,
        "plugins": {"path": str(plan.plugins), "sha256": plan.plugin_sha} if plan.plugin_sha else None,
        "timing_cache": str(plan.timing_cache) if plan.timing_cache else None,
        "float_weights": plan.float_weights,
        "engine_weights": plan.engine_weights,
        "weights_files": weights_files(entries),
        "size": summary(entries),
        "build_time": build_time(entries),
        "engines": entries,
    }


def write(out_dir: Path, manifest: dict) -> dict:
    write_atomic(Path(out_dir) / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return manifest
