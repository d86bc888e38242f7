"""The ``metrale-export`` entry point: a Click group whose default command is the main job.

``metrale-export MODEL`` runs the main job (``run``); ``metrale-export export|build|compare|inspect``
run one step. Every failure ends here as one line and an exit code: 2 for bad input, usage or an
unusable output location, 1 for a failed step or check, 130 for Ctrl-C.

Invariants: importing this module and building every command's ``--help`` imports neither torch nor
onnx (each command module imports its heavy dependencies inside the command), so ``--help`` answers
in well under a second; a Ctrl-C at any point after the interpreter started prints one line, never a
traceback.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading


def _on_sigint(handler) -> object:
    """Set the SIGINT handler (main thread only, and not where SIGINT is ignored); return the old one."""
    old = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is threading.main_thread() and old is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, handler)
    return old


def _interrupted_while_starting(*_) -> None:
    os.write(2, b"\nError: interrupted (Ctrl-C) while starting; nothing was written\n")
    os._exit(130)


_interrupted = False


@atexit.register  # registered first, so it runs last, after every other exit handler
def _exit_130_after_an_interrupt() -> None:
    """Make the exit code 130 once the interrupt has been reported.

    CPython remembers a KeyboardInterrupt that escaped any ``exec`` of a string (dataclasses and
    namedtuple build their methods that way) and, under ``python -m``, re-kills itself with SIGINT
    at exit even though the interrupt was caught: the caller saw -2, not 130.
    """
    if _interrupted:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stream must not change the code
                pass
        os._exit(INTERRUPTED)


# Until the group below can catch KeyboardInterrupt, a Ctrl-C exits with one line (nothing written yet).
_previous_sigint = _on_sigint(_interrupted_while_starting)

import difflib  # noqa: E402
import errno  # noqa: E402
import importlib  # noqa: E402
from pathlib import Path  # noqa: E402

import click  # noqa: E402

from ..errors import MetraleError  # noqa: E402


# Subcommand modules, each defining a Click command ``command``.
_COMMAND_MODULES = ("run", "export", "inspect", "compare", "build", "demo")
_DEFAULT = "run"
INTERRUPTED = 130
# OSErrors that mean the output location cannot be used (exit 2, like bad input); others fail a step.
_LOCATION_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.ENOSPC,
                    errno.EDQUOT, errno.ENOENT, errno.EEXIST, errno.ENAMETOOLONG, errno.EXDEV}


def describe_os_error(e: OSError) -> str:
    """One line for an OSError: the path, what is wrong and what to do."""
    where = e.filename if e.filename is not None else "output"
    reason = e.strerror or str(e)
    hint = {
        errno.ENOSPC: "free some space or choose another -o location",
        errno.EDQUOT: "free some space or choose another -o location",
        errno.EROFS: "choose a writable -o location",
        errno.EACCES: "choose a location you can write to (-o)",
        errno.EPERM: "choose a location you can write to (-o)",
        errno.ENOTDIR: "a parent of the path is a file; choose another -o location",
    }.get(e.errno)
    return f"{where}: {reason}" + (f"; {hint}" if hint else "")


class _DefaultGroup(click.Group):
    """A group that runs ``run`` when the first argument is not a subcommand (a model path), and the
    one place where errors become one line and an exit code.

    Hand-written (a few lines) rather than the click-default-group package: it is all we need of it.
    """

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            word = args[0]
            if not Path(word).exists():
                close = difflib.get_close_matches(word, list(self.commands), n=1, cutoff=0.6)
                if close:
                    ctx.fail(f"No such command {word!r}. Did you mean {close[0]!r}? "
                             f"(and no file or directory {word!r} to run the main job on)")
                if os.sep not in word and "." not in word:
                    ctx.fail(f"No such command {word!r} (commands: {', '.join(self.commands)}), and no "
                             f"file or directory {word!r} to run the main job on")
            args = [_DEFAULT, *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MetraleError as e:
            raise _OneLineError(str(e), e.exit_code) from e
        except OSError as e:
            code = 2 if e.errno in _LOCATION_ERRNOS else 1
            raise _OneLineError(describe_os_error(e), code) from e

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        global _interrupted
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            e.show()
            code = e.exit_code
        except (click.Abort, KeyboardInterrupt) as e:  # Click turns a KeyboardInterrupt into Abort
            cause = e if isinstance(e, KeyboardInterrupt) else e.__cause__
            note = getattr(cause, "note", None) or "nothing partial was left behind"  # errors.Interrupted
            click.echo(f"\nError: interrupted (Ctrl-C); {note}", err=True)
            code = INTERRUPTED
            _interrupted = True
        raise SystemExit(code if isinstance(code, int) else 0)


class _OneLineError(click.ClickException):
    """A library error shown as one message, with its exit code (2 input, 1 failure)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@click.group(cls=_DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="metrale-export")
def cli() -> None:
    """Turn a quantized Qwen3-family safetensors checkpoint into ONNX with metrale projection ops
    and TensorRT engines, one per row-count profile.

    \b
    The main job:   metrale-export MODEL [-o DIR] [--weight-quantization auto|declared|none|w4a16|w8a8|w4a4]
    One step:       metrale-export export|build|compare|inspect ...
    A demo model:   metrale-export demo-model DIR   (or: make demo)
    """


for _name in _COMMAND_MODULES:
    _module = importlib.import_module(f"{__package__}.{_name}")
    cli.add_command(_module.command)

# From here on the group turns KeyboardInterrupt into its one line and exit code 130.
_on_sigint(_previous_sigint or signal.default_int_handler)


def main() -> None:
    """Console-script entry."""
    cli()


if __name__ == "__main__":
    main()
