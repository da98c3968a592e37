"""Waiting for Ctrl-C (SIGINT) or SIGTERM in a long-running command.

Python runs signal handlers in the main thread only, and a signal the kernel delivers to another
thread (a server's, moto's) does not wake a main thread blocked in `Event.wait()`: it would wait
on. So the main thread sleeps in short steps, and the handlers only note the signal (`Event.set`
from a handler can deadlock on the event's own lock).
"""

from __future__ import annotations

import signal
import time
from types import FrameType

POLL_S = 0.2  # how soon a signal delivered to another thread is acted on


class StopSignals:
    """Catches `signals` from construction on (main thread only); `wait` blocks until one came."""

    def __init__(self, signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
        self.received: list[signal.Signals] = []
        for sig in signals:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signal.Signals(signum))

    def wait(self) -> signal.Signals:
        while not self.received:
            time.sleep(POLL_S)
        return self.received[0]
