"""Exports are byte-identical to the record in tests/support/export_hashes.json (the demo and
hybrid-demo checkpoints in every weight format).

A change that is MEANT to change export bytes (a quantizer, a new attribute, bf16 scales, ...)
regenerates the record with one command from the repository root and commits it with the change:

    python tests/support/export_hashes.py --write

The default suite checks the cases of ``DEFAULT_CASES`` (the demo's four formats reuse the suite's
shared exports); ``-m slow`` checks the rest.
"""

from __future__ import annotations

import pytest

from support import export_hashes as H

RECORD = H.read_record()
_REGEN = "if the change of export bytes is intended, run: python tests/support/export_hashes.py --write"


def test_record_covers_every_case():
    assert set(RECORD) == set(H.CASES), _REGEN
    assert set(H.DEFAULT_CASES) <= set(H.CASES)


@pytest.fixture(scope="session")
def hybrid_checkpoint(tmp_path_factory):
    return H.write_checkpoint("hybrid", tmp_path_factory.mktemp("hybrid-demo"))


def _export(name, tmp_path, demo_checkpoint, demo_exports, hybrid_checkpoint):
    kind, request, dtype = H.CASES[name]
    if kind == "demo" and dtype == "float32" and set(request) == {"weight"} and request["weight"] in demo_exports:
        return demo_exports[request["weight"]]
    ckpt = demo_checkpoint if kind == "demo" else hybrid_checkpoint
    return H.export_case(name, ckpt, tmp_path / name)


@pytest.mark.parametrize("name", H.DEFAULT_CASES)
def test_export_bytes_match_the_record(name, tmp_path, demo_checkpoint, demo_exports, hybrid_checkpoint):
    got = H.file_hashes(_export(name, tmp_path, demo_checkpoint, demo_exports, hybrid_checkpoint))
    assert got == RECORD[name], f"{name}: export bytes changed; {_REGEN}"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in H.CASES if n not in H.DEFAULT_CASES])
def test_export_bytes_match_the_record_slow(name, tmp_path, demo_checkpoint, demo_exports, hybrid_checkpoint):
    got = H.file_hashes(_export(name, tmp_path, demo_checkpoint, demo_exports, hybrid_checkpoint))
    assert got == RECORD[name], f"{name}: export bytes changed; {_REGEN}"
