"""The worker's stop: warm on the first SIGTERM/SIGINT, cold on the second."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

log = logging.getLogger(__name__)


class StopFlag:
    """Warm stop on the first signal, cold (SystemExit now) on the second."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        """Make SIGTERM and SIGINT set this flag (and a second one exit at once)."""
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.event.is_set():
            log.warning("second signal: stopping now")
            raise SystemExit(1)
        log.info("signal %d: finishing the batch in hand, then stopping", signum)
        self.event.set()

    def __bool__(self) -> bool:
        return self.event.is_set()
