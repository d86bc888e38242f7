"""``metrale-export compare DIR``: ONNX Runtime (reference ops) vs the PyTorch model, per op, per layer
and end to end (compare.accuracy); exit 1 when a piece is out of its bound."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import CheckFailed
from . import options as opt
from .streams import library_output_to_stderr

SHOWN = 8  # layers in the default table, worst first


def _fmt(r) -> str:
    bound = getattr(r, "bound", None) or r.tolerance
    return f"{r.rel_error:.2e} / {bound:.1e}"


def print_report(report, as_json: bool, verbose: bool = False, err: bool = False) -> None:
    """The comparison's table (worst layers first; ``verbose``: everything), on stdout (``compare``'s
    result) or, with ``err``, on stderr (the main job, whose stdout is for --json)."""
    if as_json:
        click.echo(report.to_json())
        return

    def echo(line=""):
        click.echo(line, err=err)

    _print_end_to_end(report, verbose, echo)
    _print_layers(report, verbose, echo)
    if verbose and report.ops:
        echo("every op (teacher-forced):")
        for r in report.ops:
            echo(f"  {r.case:<9}{r.projection:<44}{r.op_type:<11}{r.activation_format:<7}{_fmt(r):>20}  "
                 f"{_yes(r.ok)}")
    for note in report.notes:
        echo(f"note: {note}")


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def _print_end_to_end(report, verbose: bool, echo) -> None:
    """Per case the logits and the worst state output (``verbose``: every output)."""
    echo("end to end, ONNX Runtime vs PyTorch (relative error / bound from depth and format):")
    echo(f"  {'case':<9}{'output':<34}{'rel. error / bound':>22}{'cosine':>12}{'top-1':>8}{'KL':>10}  ok")
    for case in dict.fromkeys(r.case for r in report.rows):
        rows = [r for r in report.rows if r.case == case]
        states = [r for r in rows if r.output != "logits"]
        for r in _shown_end_to_end(rows, states, verbose):
            echo(_end_to_end_line(case, r, verbose, len(states)))


def _end_to_end_line(case: str, r, verbose: bool, states: int) -> str:
    """One row of the end-to-end table (``states``: how many state outputs the case has)."""
    label = r.output if verbose or r.output == "logits" else f"{r.output} (worst of {states})"
    extra = (f"{r.cosine:>12.7f}{r.top1:>8.3f}{r.kl:>10.1e}" if r.cosine is not None else " " * 30)
    return f"  {case:<9}{label:<34}{_fmt(r):>22}{extra}  {_yes(r.ok)}"


def _shown_end_to_end(rows, states, verbose: bool) -> list:
    """One case's rows to print: the logits, then every state (``verbose``) or the worst one."""
    shown = [r for r in rows if r.output == "logits"]
    if verbose:
        return shown + states
    if states:
        shown.append(max(states, key=lambda r: r.rel_error / r.tolerance))
    return shown


def _print_layers(report, verbose: bool, echo) -> None:
    """The worst op and layer output per layer, worst layers first (``verbose``: every layer)."""
    groups = report.by_layer()
    if not groups:
        return
    shown = groups if verbose else groups[:SHOWN]
    more = "" if len(shown) == len(groups) else f"; {len(shown)} of {len(groups)} shown, --verbose for all"
    echo(f"per layer, teacher-forced on ONNX Runtime's own inputs (worst first{more}):")
    echo(f"  {'layer':<7}{'worst op':<28}{'error / bound':>20}  {'worst layer output':<36}"
         f"{'error / bound':>20}  ok")
    for g in shown:
        op, out = g["op"], g["out"]
        name = "head" if g["layer"] is None else str(g["layer"])  # the final norm and the lm_head
        op_txt = (op.projection.split(f"layers.{g['layer']}.", 1)[-1], _fmt(op)) if op else ("-", "")
        out_txt = (f"{out.output} ({out.case})", _fmt(out)) if out else ("-", "")
        echo(f"  {name:<7}{op_txt[0]:<28}{op_txt[1]:>20}  {out_txt[0]:<36}{out_txt[1]:>20}  {_yes(g['ok'])}")


def run_compare(export_dir: Path, checkpoint, tolerance, quiet: bool, as_json: bool, verbose: bool = False):
    from polygraphy.logger import G_LOGGER

    from ..compare.accuracy import compare_export
    from .progress import StepProgress

    G_LOGGER.module_severity = G_LOGGER.ERROR
    bar = StepProgress("comparing", enabled=not (quiet or as_json), unit="segment")
    with library_output_to_stderr():
        report = compare_export(export_dir, checkpoint, tolerance=tolerance, progress=bar)
    if not quiet:
        print_report(report, as_json, verbose)
    failure = report.first_failure()
    if failure:
        raise CheckFailed(f"{export_dir}: ONNX Runtime and PyTorch disagree beyond tolerance; "
                          f"first out of bounds: {failure}")
    return report


@click.command("compare")
@click.argument("export_dir", metavar="DIR", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--checkpoint", type=click.Path(exists=True, path_type=Path),
              help="The checkpoint the export came from (default: the path in manifest.json).")
@click.option("--tolerance", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Replace the end-to-end bound of every output (default: docs/ops.md's, from the depth at "
                   "which the output is computed and the activation formats). Per-op and per-layer bounds "
                   "stay.")
@click.option("-v", "--verbose", is_flag=True,
              help="Every layer, every end-to-end output and every op (default: the worst layers).")
@click.option("--row-invariance", "invariance", is_flag=True,
              help="Also feed decode rows alone and in batches (1, 2, 3, 8, 9, 32, 33) through the "
                   "PyTorch model and report outputs whose bits differ; on a GPU it runs the CUDA ops "
                   "(the plugins' arithmetic).")
@click.option("--device", default=None, help="Device of the row-invariance run (default: cuda if available).")
@opt.quiet_option
@opt.json_option
def command(export_dir, checkpoint, tolerance, verbose, invariance, device, quiet, as_json):
    """Compare an export in ONNX Runtime (metrale ops by their reference implementation) against the
    PyTorch model built from the same checkpoint, on a prefill and a decode step with a KV cache:
    every metrale op and every decoder layer on ONNX Runtime's own inputs (teacher-forced), and the
    logits and states end to end. Exit code 1 when any piece is out of its bound (the message names
    the first layer and op), or, with --row-invariance, when a row's logits change with the batch."""
    run_compare(export_dir, checkpoint, tolerance, quiet, as_json, verbose)
    if invariance:
        run_row_invariance(export_dir, checkpoint, device, quiet)


CPU_ROW_INVARIANCE = (
    "row invariance on the CPU checks the PyTorch model with the metrale reference ops: torch's CPU "
    "float kernels (the attention and norm reductions, the float lm_head, and the references' own "
    "matmuls) choose their blocking by batch size, so rows usually differ here and this says nothing "
    "about the engines. What the engines promise is checked on a GPU (--device cuda, the CUDA ops "
    "that are the plugins' arithmetic).")


def run_row_invariance(export_dir: Path, checkpoint, device, quiet: bool) -> None:
    from ..compare.accuracy import load_manifest
    from ..compare.row_invariance import row_invariance
    from ..compare.runners import torch_model_factory

    manifest = load_manifest(export_dir)
    device = _row_invariance_device(device)
    checkpoint = checkpoint or manifest["model"]["checkpoint_path"]
    on_cpu = not device.startswith("cuda")
    if on_cpu and not quiet:
        click.echo(CPU_ROW_INVARIANCE)
    model = torch_model_factory(export_dir, Path(checkpoint), manifest)().to(device).eval()
    rows = row_invariance(model, [1, 2, 3, 8, 9, 32, 33])
    if not quiet:
        _print_row_invariance(rows, device, on_cpu)
    bad = [r for r in rows if r.output == "logits" and not r.ok]
    if bad:
        raise _rows_changed(export_dir, device, bad, on_cpu)


def _row_invariance_device(device: str | None) -> str:
    """The device asked for, else cuda where there is one; the CUDA ops are loaded for cuda."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        from ..ops import cuda  # noqa: F401  (the CUDA kernels of the metrale ops)
    return device


def _rows_changed(export_dir: Path, device: str, bad: list, on_cpu: bool) -> CheckFailed:
    """The failure for logits rows that change with the batch size (``bad``)."""
    return CheckFailed(f"{export_dir}: logits of some rows change with the batch size on {device} "
                       f"(batches {sorted({r.batch for r in bad})})"
                       + ("; on the CPU this is expected (torch's float kernels), run it on a GPU "
                          "(--device cuda) to check the plugins' arithmetic" if on_cpu else ""))


def _print_row_invariance(rows, device: str, on_cpu: bool) -> None:
    """The logits rows and every row that is not bitwise identical."""
    click.echo(f"row invariance on {device} ({'CPU reference ops' if on_cpu else 'CUDA ops'}):")
    for r in rows:
        if r.output == "logits" or not r.ok:
            click.echo(f"  {r.output:<20} batch {r.batch:>3}: {r.identical}/{r.total} rows bitwise "
                       f"identical (max |diff| {r.max_abs_diff:.2e})")
