"""``metrale-export compare DIR``: ONNX Runtime (reference ops) vs the PyTorch model; exit 1 when out
of tolerance (compare.accuracy)."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import CheckFailed
from . import options as opt


def print_report(report, as_json: bool) -> None:
    if as_json:
        click.echo(report.to_json())
        return
    click.echo(f"{'case':<9}{'output':<24}{'rel. error':>12}{'max |diff|':>12}{'tolerance':>11}  ok")
    for r in report.rows:
        click.echo(f"{r.case:<9}{r.output:<24}{r.rel_error:>12.3e}{r.max_abs:>12.3e}{r.tolerance:>11.0e}  "
                   f"{'yes' if r.ok else 'NO'}")


def run_compare(export_dir: Path, checkpoint, tolerance, quiet: bool, as_json: bool):
    from polygraphy.logger import G_LOGGER

    from ..compare.accuracy import compare_export

    G_LOGGER.module_severity = G_LOGGER.ERROR
    report = compare_export(export_dir, checkpoint, tolerance=tolerance)
    if not quiet:
        print_report(report, as_json)
    if not report.ok:
        bad = [f"{r.case}/{r.output} ({r.rel_error:.2e} > {r.tolerance:.0e})" for r in report.rows if not r.ok]
        raise CheckFailed(f"{export_dir}: ONNX Runtime and PyTorch disagree beyond tolerance: {', '.join(bad)}")
    return report


@click.command("compare")
@click.argument("export_dir", metavar="DIR", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--checkpoint", type=click.Path(exists=True, path_type=Path),
              help="The checkpoint the export came from (default: the path in manifest.json).")
@click.option("--tolerance", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Relative error bound (default: docs/ops.md's, 1e-4 unquantized, 1e-3 quantized).")
@click.option("--row-invariance", "invariance", is_flag=True,
              help="Also feed decode rows alone and in batches (1, 2, 3, 8, 9, 32, 33) through the "
                   "PyTorch model and report outputs whose bits differ; on a GPU it runs the CUDA ops "
                   "(the plugins' arithmetic).")
@click.option("--device", default=None, help="Device of the row-invariance run (default: cuda if available).")
@opt.quiet_option
@opt.json_option
def command(export_dir, checkpoint, tolerance, invariance, device, quiet, as_json):
    """Compare an export in ONNX Runtime (metrale ops by their reference implementation) against the
    PyTorch model built from the same checkpoint, on a prefill and a decode step with a KV cache.
    Exit code 1 when any output is out of tolerance (or, with --row-invariance, when a row's
    logits change with the batch)."""
    run_compare(export_dir, checkpoint, tolerance, quiet, as_json)
    if invariance:
        run_row_invariance(export_dir, checkpoint, device, quiet)


CPU_ROW_INVARIANCE = (
    "row invariance on the CPU checks the PyTorch model with the metrale reference ops: torch's CPU "
    "float kernels (the attention and norm reductions, the float lm_head, and the references' own "
    "matmuls) choose their blocking by batch size, so rows usually differ here and this says nothing "
    "about the engines. What the engines promise is checked on a GPU (--device cuda, the CUDA ops "
    "that are the plugins' arithmetic).")


def run_row_invariance(export_dir: Path, checkpoint, device, quiet: bool) -> None:
    import torch

    from ..compare.accuracy import load_manifest
    from ..compare.row_invariance import row_invariance
    from ..compare.runners import torch_model_factory

    manifest = load_manifest(export_dir)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        from ..ops import cuda  # noqa: F401  (the CUDA kernels of the metrale ops)
    checkpoint = checkpoint or manifest["model"]["checkpoint_path"]
    on_cpu = not device.startswith("cuda")
    if on_cpu and not quiet:
        click.echo(CPU_ROW_INVARIANCE)
    model = torch_model_factory(export_dir, Path(checkpoint), manifest)().to(device).eval()
    rows = row_invariance(model, [1, 2, 3, 8, 9, 32, 33])
    if not quiet:
        click.echo(f"row invariance on {device} ({'CPU reference ops' if on_cpu else 'CUDA ops'}):")
        for r in rows:
            if r.output == "logits" or not r.ok:
                click.echo(f"  {r.output:<20} batch {r.batch:>3}: {r.identical_rows}/{r.rows} rows bitwise "
                           f"identical (max |diff| {r.max_abs_diff:.2e})")
    bad = [r for r in rows if r.output == "logits" and not r.ok]
    if bad:
        raise CheckFailed(f"{export_dir}: logits of some rows change with the batch size on {device} "
                          f"(batches {sorted({r.batch for r in bad})})"
                          + ("; on the CPU this is expected (torch's float kernels), run it on a GPU "
                             "(--device cuda) to check the plugins' arithmetic" if on_cpu else ""))
