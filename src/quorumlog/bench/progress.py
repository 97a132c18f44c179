"""The live progress line of `quorumlog bench` (rich), shown only on a terminal.

Each producer adds to its own counter (`Phase.slots[k]`); rich's refresh thread reads the counter a few
times a second and redraws one line: phase, messages done (of the target), rate, elapsed.
"""
from __future__ import annotations

import contextlib
import time

from rich.console import Console
from rich.live import Live
from rich.text import Text


class Phase:
    """Counters of one measured phase. `add` is for one thread; producer k adds to
    `slots[k]` (one writer per slot, so no lock on the measured path)."""

    def __init__(self, label: str, total: int | None, duration_s: float | None):
        self.label = label
        self.total = total
        self.duration_s = duration_s
        self.slots = [0]
        self.started = time.monotonic()

    def add(self, n: int) -> None:
        self.slots[0] += n

    def use_slots(self, n: int) -> list:
        """Counters for n producer threads (replacing the single one)."""
        self.slots = [self.done] + [0] * (n - 1)
        return self.slots

    @property
    def done(self) -> int:
        return sum(self.slots)

    def __rich__(self) -> Text:
        el = max(time.monotonic() - self.started, 1e-9)
        done = self.done
        if self.total:
            amount = f"{done:,}/{self.total:,} msgs ({100 * done / self.total:.0f} %)"
        elif self.duration_s:
            amount = f"{done:,} msgs ({el:.0f}/{self.duration_s:g} s)"
        else:
            amount = f"{done:,} msgs"
        # numbers first: on a narrow terminal the label is what gets cut
        return Text(f"{amount}  {done / el:,.0f} msg/s  {el:.1f} s  {self.label}", style="cyan",
                    no_wrap=True, overflow="ellipsis")


class ProgressLine:
    """`with progress.phase(label, total, duration) as ph: ... ph.add(n)`."""

    def __init__(self, console: Console, enabled: bool | None = None):
        self.console = console
        self.enabled = console.is_terminal if enabled is None else enabled

    @contextlib.contextmanager
    def phase(self, label: str, total: int | None = None, duration_s: float | None = None):
        ph = Phase(label, total, duration_s)
        if not self.enabled:
            yield ph
            return
        with Live(ph, console=self.console, refresh_per_second=4, transient=True):
            yield ph

    def note(self, text: str) -> None:
        """A line of its own (a phase starting, a workload skipped)."""
        self.console.print(text, highlight=False)
