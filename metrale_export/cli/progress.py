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
