"""stdout is for results (the ``--json`` document, a report), stderr for everything else.

onnx-graphsurgeon, Polygraphy and other libraries print their warnings with plain ``print`` on
stdout; while a command works, ``library_output_to_stderr`` sends them to stderr, so that
``metrale-export ... --json | jq`` reads one JSON document. Invariant: a command prints its result
after the block, never inside it.
"""

from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def library_output_to_stderr():
    with contextlib.redirect_stdout(sys.stderr):
        yield
