"""Progress reporting for long steps (tqdm), silent under --quiet or --json."""

from __future__ import annotations

import sys

from tqdm import tqdm


class ByteProgress:
    """A bytes progress bar; call ``start(total)`` then ``update(n)``; ``close`` at the end."""

    def __init__(self, desc: str, enabled: bool):
        self.desc, self.enabled, self.bar = desc, enabled, None

    def note(self, text: str) -> None:
        if self.enabled:
            print(text, file=sys.stderr)

    def start(self, total: int) -> None:
        if self.enabled:
            self.bar = tqdm(total=total, desc=self.desc, unit="B", unit_scale=True, file=sys.stderr,
                            leave=False, dynamic_ncols=True)

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class StepProgress:
    """A bar of named steps with an ETA (compare: the embedding, each decoder layer, the head); call
    ``start(total)``, ``update(name)`` after each step, ``close`` at the end."""

    def __init__(self, desc: str, enabled: bool, unit: str = "step"):
        self.desc, self.enabled, self.unit, self.bar = desc, enabled, unit, None

    def start(self, total: int) -> None:
        if self.enabled:
            self.bar = tqdm(total=total, desc=self.desc, unit=self.unit, file=sys.stderr, leave=False,
                            dynamic_ncols=True)

    def update(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{name} done", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
