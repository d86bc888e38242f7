"""The ``metrale-export`` entry point: a Click group whose default command is the main job.

``metrale-export MODEL`` runs the main job (``run``); ``metrale-export export|build|compare|inspect``
run one step. Library errors become exit codes here only: 2 for bad input or usage, 1 for a failed
step or check.
"""

from __future__ import annotations

import importlib

import click

from ..errors import MetraleError

# Subcommand modules, each defining a Click command named like the module's ``COMMAND``.
_COMMAND_MODULES = ("run", "export", "inspect", "compare", "build", "demo")
_DEFAULT = "run"


class _DefaultGroup(click.Group):
    """A group that runs ``run`` when the first argument is not a subcommand (a model path).

    Hand-written (a few lines) rather than the click-default-group package: it is all we need of it.
    """

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = [_DEFAULT, *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MetraleError as e:
            raise _MetraleClickError(e) from e


class _MetraleClickError(click.ClickException):
    """A library error shown as one message, with the error's exit code (2 input, 1 failure)."""

    def __init__(self, error: MetraleError):
        super().__init__(str(error))
        self.exit_code = error.exit_code


@click.group(cls=_DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="metrale-export")
def cli() -> None:
    """Turn a quantized Qwen3-family safetensors checkpoint into ONNX with metrale projection ops
    and TensorRT engines, one per row-count profile.

    \b
    The main job:   metrale-export MODEL [-o DIR] [--weight-quantization w4a16|w8a8|w4a4|none]
    One step:       metrale-export export|build|compare|inspect ...
    A demo model:   metrale-export demo-model DIR   (or: make demo)
    """


for _name in _COMMAND_MODULES:
    _module = importlib.import_module(f"{__package__}.{_name}")
    cli.add_command(_module.command)


def main() -> None:
    """Console-script entry."""
    cli()


if __name__ == "__main__":
    main()
