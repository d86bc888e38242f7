"""The main job's up-front checks: everything that can be refused from the options, the paths and
the files' bytes alone, before torch or onnx is imported (together they take about 10-15 s to
import on a loaded 2-core machine) and before any tracing.

What is checked, in this order: the --dtype the comparison runs, the output location (writable,
new or replaceable: ``exporter.writer.check_replaceable``), the checkpoint's files, safetensors
headers and config.json, the --layers indices, the --profiles against the engines' context, a
--backend asked for by name (it must import), and every float tensor of the checkpoint finite (its
bytes streamed through numpy). ``--plugins`` is checked as an option (``check_plugin_library``).

Invariants: importing this module or running ``check_job`` imports neither torch nor onnx (a test
runs the refusals in a fresh interpreter and asserts it); every refusal is an ``InputError`` (exit
2) of one line naming the option (``UsageConflict``, whose ``param`` the CLI shows) or file. The checks that need the model (MoE expert forms, the
RTX targets of FP8 weights, the space the export needs) follow once torch is loaded.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from pathlib import Path

from .engines.profiles import UsageConflict
from .errors import CheckpointError
from .exporter import safetensors_files as st
from .exporter.names import REFERENCE_DTYPES, parse_layers

# ELF e_machine of the machines this runs on (a library built for another one cannot load).
_ELF_MACHINE = {"x86_64": 62, "aarch64": 183, "arm64": 183}
_ET_DYN = 3


# The one wording of --plugins given to another lowering (engines.plan.lowering_check, and the
# --plugins option before it reads the file: an option conflict is named before a file is checked).
PLUGINS_NEED_PLUGIN_LOWERING = "--plugins is only used by --lowering plugin; drop it or choose that lowering"


def check_plugin_library(path: Path) -> None:
    """``--plugins PATH`` must be a shared library this machine can load (an ELF ``ET_DYN`` file of
    this machine's architecture), checked from its first 20 bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError as e:
        raise UsageConflict(f"{path}: cannot be read ({e.strerror or e})", "--plugins") from e
    if head[:4] != b"\x7fELF" or len(head) < 20:
        raise UsageConflict(f"{path}: not a shared library (no ELF header); expected libmetrale_plugins.so "
                          "built by cmake (README, Engines and plugins)", "--plugins")
    order = "little" if head[5] == 1 else "big"
    kind, machine = int.from_bytes(head[16:18], order), int.from_bytes(head[18:20], order)
    want = _ELF_MACHINE.get(platform.machine())
    if head[4] != 2 or kind != _ET_DYN or (want is not None and machine != want):
        raise UsageConflict(f"{path}: an ELF file but not a 64-bit shared library for {platform.machine()} "
                          f"(class {head[4]}, type {kind}, machine {machine}); expected libmetrale_plugins.so "
                          "built on this machine", "--plugins")


def check_backend_imports(name: str | None) -> None:
    """A backend asked for by name must import (a default one that is missing only skips step 3)."""
    from .engines import backends

    if name is None:
        return
    try:
        backends._IMPORTERS[name]()
    except Exception as e:  # noqa: BLE001 - any failure to load a native library counts as absent
        raise UsageConflict(backends.missing_message(name, e) + ", or add --skip-engines to export and verify "
                          "only", "--backend") from e


@dataclass(frozen=True)
class JobInputs:
    """What the checks read: the checkpoint's files and config, and the layers asked for."""

    root: Path
    files: list[Path]
    config: dict
    layers: list[int] | None
    headers: dict  # file -> (header, data offset): read once, handed to the check and the export


def check_dtype(dtype: str, compare: bool) -> None:
    if compare and dtype not in REFERENCE_DTYPES:
        raise UsageConflict(
            f"--dtype {dtype}: the ONNX Runtime reference of step 2 (compare) runs "
            f"{' or '.join(REFERENCE_DTYPES)} activations; use --dtype float32, or --skip-compare to export "
            f"{dtype} without verifying it", "--dtype")


def read_checkpoint(model: Path, layers_spec: str | None) -> JobInputs:
    """The checkpoint's files (every safetensors header checked), its config (parsed as the export
    parses it) and the --layers indices within it."""
    from .exporter.config import parse_config

    root, files, index = st.checkpoint_files(Path(model))
    headers = st.read_headers(files)
    config = st.read_config(root)
    parsed = parse_config(config, root / "config.json")
    return JobInputs(root, files, config, parse_layers(layers_spec, parsed.num_hidden_layers), headers)


def check_profiles(inputs: JobInputs, profiles, max_context: int | None) -> None:
    """``--profiles`` against the engines' context (--max-context, else the model's, at most 4096)."""
    from .engines.profiles import ProfileError, format_profiles, parse_profiles, resolve_max_context

    model_max = inputs.config.get("max_position_embeddings")
    model_max = int(model_max) if model_max else None
    limit = resolve_max_context(max_context, model_max, inputs.root / "config.json")
    if profiles is None:
        return  # the default profiles are cut to ``limit`` by the build plan
    try:
        parse_profiles(format_profiles(profiles), max_rows=limit, model_max=model_max)
    except ProfileError as e:
        raise UsageConflict(str(e).removeprefix("--profiles: "), "--profiles") from e


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def check_finite(inputs: JobInputs) -> None:
    """Every float tensor the export may read holds no NaN or infinity (tensors of decoder layers
    left out by --layers are not read, so not checked)."""
    keep = None if inputs.layers is None else set(inputs.layers)
    found = st.nonfinite_tensor(inputs.files, lambda name: keep is None or not (m := _LAYER.search(name))
                                or int(m.group(1)) in keep, inputs.headers)
    if found:
        file, name = found
        raise CheckpointError(f"{file}: tensor {name!r} holds NaN or infinite values; the checkpoint is "
                              "damaged or was saved from a diverged run")


def check_job(model: Path, out: Path, *, force: bool, dtype: str, compare: bool, layers: str | None,
              profiles=None, max_context: int | None = None, backend: str | None = None,
              engines: bool = False) -> JobInputs:
    """Every up-front check of the main job (or, with ``engines`` False, of ``export``)."""
    from .exporter.writer import check_location

    check_dtype(dtype, compare)
    check_location(Path(out), force)
    inputs = read_checkpoint(model, layers)
    if engines:
        check_profiles(inputs, profiles, max_context)
        check_backend_imports(backend)
    check_finite(inputs)
    return inputs
