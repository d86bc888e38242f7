"""The project's exceptions. Library code raises these; only the CLI turns them into exit codes.

Invariants: every message names where (file, tensor, option, layer), what was expected and what
was found; ``InputError`` subclasses mean the user's input was wrong (exit code 2), the others a
failed step or check (exit code 1).

Refusals, one convention across the package:
- a check ("can this be done? if not, why") returns ``str | None``: the reason it cannot, or None
  when it can (``contract.kernel_k_problem``, ``contract.outdated``, ``engines.plan.lowering_conflict``,
  ``pipeline.plugins_conflict``, ``QuantOption.problem``); a check of several things returns every
  reason, ``list[str]`` (``quant_options.problems``), never a bare bool its caller must explain;
- the step that refuses raises one of these errors with the check's reason (``resolve_lowering``
  raises ``UsageConflict``), so the reason is worded once, where it is found;
- a decision returns what it chose with why (``policy.Choice``, ``policy.row_invariance``,
  ``profiles.profile_for``): there the reason explains the answer, either way.
"""

from __future__ import annotations


class MetraleError(Exception):
    """Base of every error metrale-export reports to a user."""

    exit_code = 1


class InputError(MetraleError):
    """The user's input (a checkpoint, a config, an option) is wrong: exit code 2."""

    exit_code = 2


class CheckpointError(InputError):
    """A checkpoint file, header or tensor is missing, corrupt or not what the config implies."""


class ConfigError(InputError):
    """config.json is missing, unreadable, or describes something unsupported."""


class OutputExistsError(InputError):
    """The output directory exists and --force was not given (or it is not this tool's output)."""


class OutputLocationError(InputError):
    """The output location cannot be used: read-only, not a directory, or without enough space."""


class ExportError(MetraleError):
    """Tracing or writing the ONNX model failed."""


class BuildError(MetraleError):
    """Building a TensorRT engine failed."""


class CheckFailed(MetraleError):
    """A comparison or verification ran and found results out of tolerance."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C once something complete is on disk: ``note`` says what is there and how to go on
    (the CLI prints it instead of "nothing partial was left behind"; the exit code stays 130)."""

    def __init__(self, note: str):
        super().__init__(note)
        self.note = note
