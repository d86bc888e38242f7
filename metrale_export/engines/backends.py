"""The engine backends, TensorRT and TensorRT-RTX, behind Polygraphy's loaders.

Polygraphy drives TensorRT-RTX when ``polygraphy.config.USE_TENSORRT_RTX`` is set (the
``POLYGRAPHY_USE_TENSORRT_RTX`` environment variable) and a module named ``tensorrt_rtx`` imports.
The PyPI wheels (``tensorrt-rtx-cu13-bindings``) install that module as ``tensorrt_rtx_bindings``,
so ``activate`` registers it under the name Polygraphy imports. Polygraphy binds its TensorRT module
when ``polygraphy.backend.trt`` is first imported, so one process uses one backend.

Invariants: nothing here imports a TensorRT module at import time; a missing backend raises
``BackendMissing`` with the exact ``pip install`` line.
"""

from __future__ import annotations

import importlib
import logging
import sys
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import BuildError, Check

BACKENDS = ("tensorrt", "tensorrt-rtx")
RTX_WHEELS = "tensorrt-rtx-cu13-libs==1.7.1.116 tensorrt-rtx-cu13-bindings==1.7.1.116"
INSTALL = {
    "tensorrt": "pip install tensorrt  (needs an NVIDIA GPU with its driver to build)",
    "tensorrt-rtx": f"pip install {RTX_WHEELS}  (builds on the CPU for SM 8.6/8.9/12.0)",
}
# TensorRT-RTX compiles for named targets, not the machine's GPU: CI builds for Ada (SM 8.9).
DEFAULT_RTX_TARGET = (8, 9)


class BackendMissing(BuildError):
    """The requested engine backend cannot be imported."""


@dataclass(frozen=True)
class Backend:
    """An activated backend: its name, the imported module and its version."""

    name: str
    module: object
    version: str

    @property
    def is_rtx(self) -> bool:
        return self.name == "tensorrt-rtx"

    def describe(self) -> str:
        return f"{self.name} {self.version}"


_active: Backend | None = None


def _import_trt():
    return importlib.import_module("tensorrt")


def _import_rtx():
    try:
        return importlib.import_module("tensorrt_rtx")
    except ImportError:
        module = importlib.import_module("tensorrt_rtx_bindings")
        sys.modules["tensorrt_rtx"] = module  # the name Polygraphy imports
        return module


_IMPORTERS = {"tensorrt": _import_trt, "tensorrt-rtx": _import_rtx}


def available() -> dict[str, str | None]:
    """Backend name -> version, or None when it does not import (imports, does not activate)."""
    out = {}
    for name, importer in _IMPORTERS.items():
        try:
            out[name] = str(importer().__version__)
        except Exception:  # noqa: BLE001 - any failure to load a native library counts as absent
            out[name] = None
    return out


def cuda_driver() -> bool:
    """Whether a CUDA driver loads and initializes here (``cuInit``); no TensorRT import."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return lib.cuInit(0) == 0


def missing_message(name: str | None, error: Exception | None = None) -> str:
    if name is None:
        return (
            "no TensorRT backend is installed: neither `import tensorrt` nor the TensorRT-RTX "
            f"bindings import. Install one: `{INSTALL['tensorrt']}` or `{INSTALL['tensorrt-rtx']}`"
        )
    why = f" ({type(error).__name__}: {error})" if error else ""
    return f"backend {name}: the module does not import{why}; install it: `{INSTALL[name]}`"


def activate(name: str | None = None) -> Backend:
    """Import the backend (``None``: tensorrt if it imports, else tensorrt-rtx) for Polygraphy."""
    global _active
    if name is None:
        name = _default_backend()
    if name not in BACKENDS:
        raise BuildError(f"backend {name!r}: expected one of {', '.join(BACKENDS)}")
    if _active is not None and _active.name == name:
        return _active
    module = _import(name)
    from polygraphy import config

    wants_rtx = name == "tensorrt-rtx"
    check = activation_check(name, _active.name if _active else None,
                             config.USE_TENSORRT_RTX if "polygraphy.backend.trt.loader" in sys.modules else None)
    if not check.ok:
        raise BuildError(f"backend {name}: {check.message}")
    config.USE_TENSORRT_RTX = wants_rtx
    _active = Backend(name, module, str(module.__version__))
    return _active


def _default_backend() -> str:
    """tensorrt if it imports, else tensorrt-rtx; ``BackendMissing`` when neither does."""
    found = available()
    name = next((n for n in BACKENDS if found[n]), None)
    if name is None:
        raise BackendMissing(missing_message(None))
    return name


def _import(name: str):
    """The backend's module; ``BackendMissing`` saying why it does not import."""
    try:
        return _IMPORTERS[name]()
    except Exception as e:  # noqa: BLE001
        raise BackendMissing(missing_message(name, e)) from e


def activation_check(name: str, active: str | None, loaders_rtx: bool | None) -> Check:
    """Whether backend ``name`` can be activated in a process where ``active`` is (None: no backend
    yet) and Polygraphy's TensorRT loaders were imported for TensorRT-RTX or not (``loaders_rtx``;
    None: not imported yet): every reason it cannot."""
    wants_rtx = name == "tensorrt-rtx"
    return Check.of([
        f"this process already builds with {active} (Polygraphy binds one TensorRT module per process); "
        f"run the other backend in its own process" if active is not None and active != name else None,
        f"Polygraphy's TensorRT loaders were already imported for the other backend in this process (set "
        f"POLYGRAPHY_USE_TENSORRT_RTX={int(wants_rtx)} before anything imports polygraphy.backend.trt)"
        if loaders_rtx is not None and loaders_rtx != wants_rtx else None,
    ])


@contextmanager
def captured_polygraphy_log(echo: bool = False):
    """Route Polygraphy's (and TensorRT's) messages into a list while building.

    Yields the list of (severity name, message) of warnings and errors; ``echo`` also prints them
    to stderr. Restores the logger afterwards.
    """
    from polygraphy.logger import G_LOGGER

    records: list[tuple[str, str]] = []

    class _Collect(logging.Handler):
        # A Ctrl-C inside Handler.__init__ (after it registers the handler, before createLock) left
        # an instance without `lock`, and logging's atexit shutdown then printed a traceback.
        lock = None

        def emit(self, record):
            records.append((record.levelname, record.getMessage()))
            if echo:
                print(record.getMessage(), file=sys.stderr)

    pylog = logging.getLogger("Polygraphy")
    handler = _Collect(level=logging.WARNING)
    old = (G_LOGGER.use_python_logging_system, G_LOGGER.module_severity, pylog.propagate,
           pylog.level, G_LOGGER.colors)
    G_LOGGER.colors = False  # plain text for the records (and no hint about the colored module)
    G_LOGGER.use_python_logging_system = True
    G_LOGGER.module_severity = G_LOGGER.WARNING
    pylog.propagate = False
    pylog.setLevel(logging.WARNING)
    pylog.addHandler(handler)
    try:
        yield records
    finally:
        pylog.removeHandler(handler)
        G_LOGGER.use_python_logging_system = old[0]
        G_LOGGER.module_severity = old[1]
        pylog.propagate = old[2]
        pylog.setLevel(old[3])
        G_LOGGER.colors = old[4]
