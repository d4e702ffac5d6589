"""Wall seconds per named phase, nested and accumulated (what dagent.train.timing splits a step by).

Safe to share between threads (updates are locked), but phases that overlap in time on several
threads add up their seconds: a split by phase means something only for one thread's work, as
TRL's tool loop is (it calls sync tools one after another)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator


@dataclass
class PhaseClock:
    """Accumulated wall seconds per phase since the last `take()`."""

    totals: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            with self._lock:
                self.totals[name] += spent

    def timed(self, name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return fn(*args, **kwargs)

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    def take(self) -> dict[str, float]:
        with self._lock:
            out, self.totals = dict(self.totals), defaultdict(float)
        return out
