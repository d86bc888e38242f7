"""``metrale-export demo-model DIR``: write the built-in demo checkpoint (exporter.demo)."""

from __future__ import annotations

from pathlib import Path

import click

from ..exporter.demo import write_demo


@click.command("demo-model")
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", default=0, show_default=True, help="Seed of the random weights.")
def command(out_dir, seed):
    """Write a tiny random Qwen3 checkpoint (model.safetensors + config.json) into DIR."""
    path = write_demo(out_dir, seed)
    click.echo(f"wrote {path} and {path.parent / 'config.json'}")
