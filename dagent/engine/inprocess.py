"""The trainer's own model served over HTTP from the trainer's process: on-policy black-box
rollouts on a CPU (or any single process) with no weight transfer.

`InProcessEngine(model, tokenizer)` wraps the LIVE module the trainer optimises in a
`LocalEngine` and serves it (OpenAI-compatible, vLLM-shaped answers with token ids and logprobs,
`dagent.engine.server`) from a uvicorn thread on a free loopback port. Every forward pass reads
the current parameters, so an agent's calls are answered by the policy as it is at that step.

INVARIANTS
- `generating()` wraps the rollout phase: the module is put in eval mode (no dropout; and
  transformers turns the KV cache OFF for a training-mode module with gradient checkpointing,
  which would make every token a full forward) and back to its previous mode afterwards.
- `weights_changed()` empties the prefix cache: keys/values computed under the previous weights
  must never be reused after an optimizer step (they would make the engine's logprobs, and the
  tokens sampled from them, those of a policy that no longer exists). `generating()` calls it on
  entry, so a rollout phase never starts from stale entries.
- The served weights are the trainer's, as the optimizer left them. By default the engine serves
  the module itself (its dtype IS the trainer's, F06 by construction). With `dtype="bfloat16"` (a
  CPU that computes bfloat16 natively, where the trainer's own forward and backward run in a
  bfloat16 autocast too: `bf16=True`) it serves a bfloat16 copy, and `generating()` copies the
  module's current weights into it on entry, so every rollout phase samples from the weights the
  last optimizer step wrote, rounded as the trainer's autocast forward rounds them. A copy, not an
  autocast: autocast casts every weight again at every decoding step (measured here, 4 groups of
  4 pi rollouts: the engine's steps 32.2 s in float32, 30.6 s under autocast;
  `benchmarks/blackbox_train.py` measures the copy).
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, wait
from typing import Any

from dagent.core.sampling import DEFAULT_SAMPLING, Sampling
from dagent.engine.generation import LocalEngine
from dagent.engine.server import create_app
from dagent.errors import EngineError
from dagent.serving import ThreadedServer


class InProcessEngine:
    """Serve `model` (the trainer's module) as `served_model_name` on 127.0.0.1; a context manager."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        served_model_name: str,
        max_model_len: int = 32_768,
        sampling: Sampling = DEFAULT_SAMPLING,
        max_num_seqs: int = 16,
        eos_token_ids: tuple[int, ...] | None = None,
        policy: Any = None,
        dtype: str | None = None,
    ) -> None:
        """`policy`: what generates, when not the module itself: a callable over the module served
        (a test steers the weights towards a script; `policy(module, tokenizer)` builds it).
        `dtype`: None serves the module itself; "bfloat16" a bfloat16 copy, synced at every
        `generating()` (module docstring)."""
        import torch

        if dtype not in (None, "bfloat16"):
            raise EngineError(
                f"dtype={dtype!r}: the in-process engine serves the module itself (None) or a bfloat16 copy of it"
            )
        eos = eos_token_ids or _eos_ids(model, tokenizer)
        self.model, self.served = model, served_model_name
        self.copy = None
        if dtype is not None:  # the parameters only: buffers (rotary inv_freq) stay float32, as
            # from_pretrained(dtype=bfloat16) keeps them; cast too, the batched self-check fails on them
            self.copy = copy.deepcopy(model).eval()
            for p in self.copy.parameters():
                p.data = p.data.to(torch.bfloat16)
        module = model if self.copy is None else self.copy
        generator = module if policy is None else policy(module, tokenizer)
        self.engine = LocalEngine(
            generator,
            tokenizer,
            eos_token_ids=eos,
            max_model_len=max_model_len,
            dtype=str(next(module.parameters()).dtype).removeprefix("torch."),
            name=served_model_name,
            max_num_seqs=max_num_seqs,
        )
        self.dtype: torch.dtype = next(module.parameters()).dtype
        self.sampling = sampling
        self._server: Any = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise EngineError("the in-process engine is not serving: call start()")
        return self._server.url

    def start(self, timeout_s: float = 60.0) -> InProcessEngine:
        app = create_app(self.engine, served_model_name=self.served, sampling=self.sampling)
        self._server = ThreadedServer(app, timeout_keep_alive=75).start(timeout_s)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        self._server = None

    def __enter__(self) -> InProcessEngine:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def batched(self) -> bool:
        return self.engine.batched

    def weights_changed(self) -> None:
        """Forget every cached key/value (computed under weights an optimizer step replaced)."""
        prefix = getattr(self.engine.backend, "prefix", None)
        if prefix is not None:
            prefix.clear()

    def serve_until(self, futures: Sequence[Future[Any]]) -> None:
        """Compute the engine's steps on the calling thread until every future is done: the
        trainer's main thread, idle while its rollouts run, is where torch's kernels run fastest
        (`dagent.engine.scheduler.Scheduler.serve_here`; `benchmarks/inprocess.py` measures it)."""
        done = threading.Event()
        threading.Thread(target=lambda: (wait(futures), done.set()), name="rollouts-done", daemon=True).start()
        self.engine.scheduler.serve_here(done)

    def sync(self) -> None:
        """Copy the module's current weights into the served copy (none: nothing to do)."""
        import torch

        if self.copy is None:
            return
        with torch.no_grad():
            for (name, mine), (theirs_name, theirs) in zip(
                self.copy.state_dict().items(), self.model.state_dict().items(), strict=True
            ):
                if name != theirs_name:
                    raise EngineError(f"the served copy's {name} is not the module's {theirs_name}: rebuild the engine")
                mine.copy_(theirs)

    @contextlib.contextmanager
    def generating(self) -> Iterator[InProcessEngine]:
        """The rollout phase: eval mode, the current weights (copied, where a copy is served), a
        fresh prefix cache; the previous mode restored after."""
        was_training = self.model.training
        self.model.eval()
        self.sync()
        self.weights_changed()
        try:
            yield self
        finally:
            self.model.train(was_training)


def _eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if ids is None:
        ids = tokenizer.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or ())
    if not ids:
        raise EngineError(
            "the model names no end-of-sequence token (generation_config.eos_token_id): set it, or pass eos_token_ids="
        )
    return tuple(int(i) for i in ids)
