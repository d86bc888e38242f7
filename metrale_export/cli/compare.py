"""``metrale-export compare DIR``: ONNX Runtime (reference ops) vs the PyTorch model; exit 1 when out
of tolerance (compare.accuracy)."""

from __future__ import annotations

from pathlib import Path

import click

from ..compare.accuracy import compare_export
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
@click.option("--tolerance", type=float, default=None,
              help="Relative error bound (default: docs/ops.md's, 1e-4 unquantized, 1e-3 quantized).")
@opt.quiet_option
@opt.json_option
def command(export_dir, checkpoint, tolerance, quiet, as_json):
    """Compare an export in ONNX Runtime (metrale ops by their reference implementation) against the
    PyTorch model built from the same checkpoint, on a prefill and a decode step with a KV cache.
    Exit code 1 when any output is out of tolerance."""
    run_compare(export_dir, checkpoint, tolerance, quiet, as_json)
