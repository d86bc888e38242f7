"""The project's exceptions. Library code raises these; only the CLI turns them into exit codes.

Invariants: every message names where (file, tensor, option, layer), what was expected and what
was found; ``InputError`` subclasses mean the user's input was wrong (exit code 2), the others a
failed step or check (exit code 1).

Refusals, one shape across the package (vLLM's ``can_implement(config) -> (ok, reason)``):
- a check ("can this be done? if not, why") returns a ``Check``, ``(ok, reasons)``, holding EVERY
  reason it finds, not the first: ``contract.kernel_k_check``, ``contract.version_check``,
  ``w4a16.shape_check``, ``QuantOption.check`` and ``quant_options.check``, the format readers'
  declaration checks (``formats.base.refuse_declaration`` raises with them),
  ``engines.plan.lowering_check``, ``plan.rtx_targets_check``, ``plan.kernel_limits_check``,
  ``backends.activation_check``, ``resources.machine_check``, and the pipeline's conflicts
  (``pipeline.job_conflicts``: ``plugins_check``, ``moe_experts_check``, ``engine_targets_check``);
  ``Check.of`` makes one from reasons, ``all_of`` joins several;
- the step that refuses raises one of these errors with ``check.message``, the reasons on one line
  joined by "; ", so each reason is worded once, where it is found;
- a decision returns what it chose with why (``policy.Choice``, ``policy.row_invariance``,
  ``profiles.profile_for``): there the reason explains the answer, either way.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple


class Check(NamedTuple):
    """A check's answer: ``ok``, and every reason it is not (none when ok)."""

    ok: bool
    reasons: tuple[str, ...] = ()

    @classmethod
    def of(cls, reasons: Iterable[str | None]) -> "Check":
        """The check refused for each reason given (None and empty reasons are no reason)."""
        found = tuple(r for r in reasons if r)
        return cls(not found, found)

    @property
    def message(self) -> str:
        """The reasons on one line (a user-facing message), "" when ok."""
        return "; ".join(self.reasons)


OK = Check(True)


def all_of(checks: Iterable[Check]) -> Check:
    """Every reason of ``checks``, in order."""
    return Check.of(r for c in checks for r in c.reasons)


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
