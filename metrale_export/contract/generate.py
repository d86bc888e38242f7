"""The files the contract generates for the C++ side: ``plugins/contract.json`` (``to_json``) and
``plugins/include/metrale/contract.h`` (contract/header.py), whether they are current (``stale``),
and ``python -m metrale_export.contract [--write | --check]`` (``main``).

Invariants:
- the texts are pure functions of the contract: regenerating an unchanged contract gives the same
  bytes, and tests/contract fails when a generated file differs from them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from .numerics import (ACTIVATION_FORMATS, DOMAIN, E2M1_MAX, E2M1_VALUES, E4M3_MAX, FAMILIES, FP8_BLOCK,
                       KERNEL_K_MULTIPLE, NVFP4_BLOCK, NVFP4_GLOBAL_DIVISOR, X_DTYPES)
from .ops import (GDN_CONV_KERNELS, GDN_HEAD_K_DIMS, GDN_HEAD_V_BLOCK, GDN_L2NORM_EPS, GDN_SOFTPLUS_THRESHOLD,
                  GDN_STATE_PART, OPS, RMSNORM_BLOCK)
from .registry import domain_version
from .schema import OpSpec

def to_dict() -> dict:
    """The contract as plain data (the JSON the C++ side is checked against)."""
    return {
        "domain": DOMAIN,
        "domain_version": domain_version(),
        "families": list(FAMILIES),
        "activation_formats": list(ACTIVATION_FORMATS),
        "x_dtypes": list(X_DTYPES),
        "e4m3_max": E4M3_MAX,
        "e2m1_max": E2M1_MAX,
        "e2m1_values": list(E2M1_VALUES),
        "nvfp4_global_divisor": NVFP4_GLOBAL_DIVISOR,
        "fp8_block": FP8_BLOCK,
        "nvfp4_block": NVFP4_BLOCK,
        "kernel_k_multiple": dict(KERNEL_K_MULTIPLE),
        "rmsnorm_block": RMSNORM_BLOCK,
        "gdn_l2norm_eps": GDN_L2NORM_EPS,
        "gdn_softplus_threshold": GDN_SOFTPLUS_THRESHOLD,
        "gdn_head_k_dims": list(GDN_HEAD_K_DIMS),
        "gdn_head_v_block": GDN_HEAD_V_BLOCK,
        "gdn_state_part": GDN_STATE_PART,
        "gdn_conv_kernels": list(GDN_CONV_KERNELS),
        "ops": {t: _op_dict(o) for t, o in OPS.items()},
    }


def _op_dict(o: OpSpec) -> dict:
    d = asdict(o)
    d["inputs"] = [{**asdict(i), "shape": list(i.shape), "optional": i.optional} for i in o.inputs]
    d["outputs"] = [{**asdict(x), "shape": list(x.shape), "optional": x.optional} for x in o.outputs]
    d["attributes"] = [{**asdict(a), "values": None if a.values is None else list(a.values)}
                       for a in o.attributes]
    d["activation_formats"] = list(o.activation_formats)
    d["torch_name"] = o.torch_name
    d["torch_input_order"] = list(o.torch_inputs)
    return d


def to_json() -> str:
    return json.dumps(to_dict(), indent=2, sort_keys=True) + "\n"


JSON_PATH = Path(__file__).resolve().parents[2] / "plugins" / "contract.json"


def generated() -> dict[Path, str]:
    """The files generated from the contract for the C++ side, path -> text: plugins/contract.json
    and plugins/include/metrale/contract.h."""
    from . import header

    return {JSON_PATH: to_json(), header.HEADER_PATH: header.to_header()}


def stale() -> list[str]:
    """One line per generated file that differs from what the contract generates (empty: current)."""
    return [f"{path}: differs from what metrale_export/contract generates (hand-edited or stale): regenerate "
            f"it with python -m metrale_export.contract --write"
            for path, text in generated().items() if not path.exists() or path.read_text() != text]


def main(argv: list[str]) -> int:
    """``python -m metrale_export.contract [--write | --check]``: print the JSON; write the generated
    files (plugins/contract.json, plugins/include/metrale/contract.h); or exit 1 when one is stale."""
    if "--write" in argv:
        for path, text in generated().items():
            path.write_text(text)
            print(f"wrote {path}")
    elif "--check" in argv:
        problems = stale()
        print("\n".join(problems) or "the generated files are current")
        return 1 if problems else 0
    else:
        sys.stdout.write(to_json())
    return 0

