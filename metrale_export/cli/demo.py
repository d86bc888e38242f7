"""``metrale-export demo-model DIR``: write the built-in demo checkpoint (exporter.demo)."""

from __future__ import annotations

from pathlib import Path

import click


def checkpoint_files(d: Path) -> list[Path]:
    """The files in d that the demo would overwrite, or mix with (another checkpoint's shards)."""
    return [p for p in d.iterdir() if p.name == "config.json" or p.name.endswith(".safetensors")
            or p.name.endswith(".safetensors.index.json")]


@click.command("demo-model")
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", default=0, show_default=True, help="Seed of the random weights.")
@click.option("--hybrid", is_flag=True,
              help="A Qwen3-Next-shaped model instead: Gated DeltaNet and attention layers, MoE with a "
                   "shared expert.")
@click.option("--moe", is_flag=True,
              help="A Qwen3-MoE-shaped model instead: 4 experts (top 2) in layer 0, a dense MLP in layer 1.")
@click.option("--force", is_flag=True, help="Replace the checkpoint files DIR already holds.")
def command(out_dir, seed, hybrid, moe, force):
    """Write a tiny random Qwen3 checkpoint (model.safetensors + config.json) into DIR."""
    if hybrid and moe:
        raise click.BadParameter("choose one of --hybrid and --moe", param_hint="--moe")
    _clear(out_dir, force)
    path = _write(out_dir, seed, hybrid, moe)
    from ..exporter.writer import follow_umask

    follow_umask(path)  # safetensors writes 0600; a checkpoint others may read follows the umask
    click.echo(f"wrote {path} and {path.parent / 'config.json'}")


def _clear(out_dir: Path, force: bool) -> None:
    """Refuse a DIR that holds a checkpoint, or with ``force`` remove its files (no shard of the old
    one stays beside the demo)."""
    held = sorted(p.name for p in checkpoint_files(out_dir)) if out_dir.is_dir() else []
    if held and not force:
        from ..errors import OutputExistsError

        raise OutputExistsError(f"{out_dir}: already holds a checkpoint ({', '.join(held)}), which the demo "
                                "would overwrite; choose another DIR, or pass --force to replace it")
    for p in checkpoint_files(out_dir) if held else []:
        p.unlink()


def _write(out_dir: Path, seed: int, hybrid: bool, moe: bool) -> Path:
    """Write the demo checkpoint asked for; its safetensors path."""
    if moe:
        from ..exporter.demo import write_moe_demo

        return write_moe_demo(out_dir, seed)
    if hybrid:
        from ..exporter.demo_hybrid import write_hybrid_demo

        return write_hybrid_demo(out_dir, seed)
    from ..exporter.demo import write_demo

    return write_demo(out_dir, seed)
