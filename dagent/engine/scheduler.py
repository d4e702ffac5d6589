"""The engine's scheduler: one thread runs the model, one step (forward pass) at a time.

Invariant: every submitted sequence ends (finished, failed with an `EngineError`, or cancelled by
its consumer) and no sequence is fed twice in one step. Scheduling follows vLLM's V1 shape:
running sequences decode one token per step, and prompts are prefilled in chunks of at most
`chunk_tokens` tokens in the same steps (so a long prompt does not stall the others for its
whole prefill), first come first served, at most `max_num_seqs` running. A backend that cannot
batch (`SerialBackend`) gets one sequence at a time and its whole prompt in one step. The thread
starts with the first request and ends when none is left (and at interpreter exit), unless a
thread made itself the model's home with `serve_here` (the engine process's main thread: see there).
"""

from __future__ import annotations

import atexit
import threading
import traceback
from collections import deque
from typing import TYPE_CHECKING

from dagent.errors import EngineError

if TYPE_CHECKING:
    from dagent.engine.batching import RaggedBackend, Row, SerialBackend

# Prompt tokens prefilled per step: small enough that the rows decoding beside a long prefill wait
# about a second a step, large enough to prefill nearly as fast as whole (benchmarks/README.md).
_PREFILL_TOKENS = 256


_SHUTDOWN = threading.Event()
_THREADS: set[threading.Thread] = set()


@atexit.register
def _stop_schedulers() -> None:
    """At interpreter exit, stop mid-step instead of tearing torch down under a running thread."""
    _SHUTDOWN.set()
    for thread in list(_THREADS):
        thread.join(timeout=5)


class Scheduler:
    """One thread runs the model: it starts with the first request and ends when none is left."""

    def __init__(
        self, backend: RaggedBackend | SerialBackend, max_num_seqs: int, chunk_tokens: int = _PREFILL_TOKENS
    ) -> None:
        self.backend = backend
        self.max_num_seqs = max_num_seqs if backend.batched else 1
        self.chunk_tokens = chunk_tokens if backend.batched else None
        self._cond = threading.Condition()
        self._waiting: deque[Row] = deque()
        self._thread: threading.Thread | None = None
        self._resident = False
        self.resident = threading.Event()  # set while a thread serves here (`serve_here`)
        self.steps = 0

    def submit(self, seq: Row) -> None:
        with self._cond:
            self._waiting.append(seq)
            if self._resident:
                self._cond.notify()
            elif self._thread is None:
                self._start_thread()

    def _start_thread(self) -> None:
        """Start the scheduler thread (the caller holds `_cond` and saw no thread running)."""
        self._thread = threading.Thread(target=self._run, name="dagent-engine", daemon=True)
        _THREADS.add(self._thread)
        self._thread.start()

    def serve_here(self, until: threading.Event) -> None:
        """Run the model on the calling thread until `until` is set (or the process exits).

        For the engine process's MAIN thread: torch's OpenMP kernels (libgomp) ran markedly slower
        when a secondary thread called them (benchmarks/README.md, `benchmarks/inprocess.py`), so
        the server runs in a thread and the model stays here.
        A step that raises fails its sequences (as on the scheduler thread) and serving goes on.
        A scheduler thread already running keeps its burst; this thread takes over after it."""
        with self._cond:
            self._resident = True
            self.resident.set()
        try:
            while not until.is_set() and not _SHUTDOWN.is_set():
                with self._cond:
                    if not self._waiting or self._thread is not None:
                        self._cond.wait(timeout=0.05 if self._waiting else 0.25)
                        continue
                try:
                    self._run()
                except Exception:  # noqa: BLE001 - _run failed every stranded sequence already
                    traceback.print_exc()
        finally:
            with self._cond:
                self._resident = False
                self.resident.clear()
                if self._waiting and self._thread is None:  # nobody serves these now: a thread does
                    self._start_thread()

    def _run(self) -> None:
        import torch

        running: list[Row] = []
        try:
            with torch.inference_mode():
                while True:
                    if _SHUTDOWN.is_set():
                        raise EngineError("the process is exiting")
                    admitted = []
                    with self._cond:
                        while self._waiting and len(running) + len(admitted) < self.max_num_seqs:
                            seq = self._waiting.popleft()
                            if not seq.cancelled:
                                admitted.append(seq)
                        if not running and not admitted:
                            if self._thread is threading.current_thread():
                                _THREADS.discard(self._thread)
                                self._thread = None
                                self._cond.notify_all()
                            return
                    for seq in admitted:
                        self.backend.admit(seq, running)
                        running.append(seq)
                    running = self._step(running)
        except BaseException as e:
            with self._cond:
                stranded = running + list(self._waiting)
                self._waiting.clear()
                if self._thread is threading.current_thread():
                    _THREADS.discard(self._thread)
                    self._thread = None
            for seq in stranded:
                seq.fail(EngineError(f"the local engine stopped: {e}"))
            if not isinstance(e, EngineError):
                raise

    def _retire(self, seq: Row, reusable: bool) -> None:
        seq.done = True
        self.backend.release(seq, reusable)

    def _step(self, running: list[Row]) -> list[Row]:
        live = []
        for seq in running:
            if seq.cancelled:
                self._retire(seq, reusable=True)
            else:
                live.append(seq)
        rows = [(seq, [seq.last_token]) for seq in live if seq.pos == len(seq.prompt)]
        budget = self.chunk_tokens
        for seq in live:
            if seq.pos < len(seq.prompt) and (budget is None or budget > 0) and self.backend.ready(seq):
                n = len(seq.prompt) - seq.pos if budget is None else min(len(seq.prompt) - seq.pos, budget)
                rows.append((seq, seq.prompt[seq.pos : seq.pos + n]))
                if budget is not None:
                    budget -= n
        if not rows:
            return live
        self.steps += 1
        try:
            logits = self.backend.forward(rows)
        except Exception as e:
            for seq, _ in rows:
                what = "on the prompt" if seq.last_token is None else "while generating"
                seq.fail(EngineError(f"the model failed {what}: {e}"))
                self._retire(seq, reusable=False)
            return [seq for seq in live if not seq.done]
        for i, (seq, ids) in enumerate(rows):
            if seq.pos < len(seq.prompt):
                seq.pos += len(ids)
                if seq.pos < len(seq.prompt):
                    continue  # more prompt to prefill: these logits are not wanted
            try:
                seq.advance(logits[i])
            except Exception as e:
                seq.fail(EngineError(f"sampling failed: {e}"))
            if seq.finished:
                self._retire(seq, reusable=True)
        return [seq for seq in live if not seq.done]
