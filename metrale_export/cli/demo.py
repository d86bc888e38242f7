"""``metrale-export demo-model DIR``: write the built-in demo checkpoint (exporter.demo)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("demo-model")
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", default=0, show_default=True, help="Seed of the random weights.")
@click.option("--hybrid", is_flag=True,
              help="A Qwen3-Next-shaped model instead: Gated DeltaNet and attention layers, MoE with a "
                   "shared expert.")
@click.option("--moe", is_flag=True,
              help="A Qwen3-MoE-shaped model instead: 4 experts (top 2) in layer 0, a dense MLP in layer 1.")
def command(out_dir, seed, hybrid, moe):
    """Write a tiny random Qwen3 checkpoint (model.safetensors + config.json) into DIR."""
    if hybrid and moe:
        raise click.BadParameter("choose one of --hybrid and --moe", param_hint="--moe")
    if moe:
        from ..exporter.demo import write_moe_demo

        path = write_moe_demo(out_dir, seed)
    elif hybrid:
        from ..exporter.demo_hybrid import write_hybrid_demo

        path = write_hybrid_demo(out_dir, seed)
    else:
        from ..exporter.demo import write_demo

        path = write_demo(out_dir, seed)
    from ..exporter.writer import follow_umask

    follow_umask(path)  # safetensors writes 0600; a checkpoint others may read follows the umask
    click.echo(f"wrote {path} and {path.parent / 'config.json'}")
