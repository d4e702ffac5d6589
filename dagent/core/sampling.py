"""Sampling settings: the one definition the engine and the trainer both read (F05).

Invariant: a request that omits temperature/top_p/top_k is sampled with `DEFAULT_SAMPLING`, and
the trainer recomputes logprobs under the very same values. When the two disagree (an engine at
temperature 1.0 feeding a trainer at 0.8, or top_p/top_k truncation the trainer does not model),
the step-0 importance ratio drifts from 1 and nothing else complains: that is failure mode F05.

`DEFAULT_SAMPLING` matches TRL's GRPOConfig defaults (temperature 1.0, top_p 1.0, top_k 0): the
full, untruncated distribution, so an engine's raw logprobs are the sampling distribution's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from dagent.errors import ConfigError

#: Below this temperature sampling is greedy (vLLM's _SAMPLING_EPS).
GREEDY_EPS = 1e-5


@dataclass(frozen=True)
class Sampling:
    """How tokens are drawn from the model's next-token distribution."""

    temperature: float = 1.0
    """Logits are divided by this before sampling; 0 means greedy (argmax)."""
    top_p: float = 1.0
    """Nucleus truncation: keep the smallest set of tokens whose probability reaches top_p; 1 keeps all."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 (or -1, vLLM's old spelling) keeps all."""

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}: set temperature=0 for greedy")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}: set top_p=1.0 to keep all tokens")
        if self.top_k < -1:
            raise ConfigError(f"top_k must be >= -1, got {self.top_k}: set top_k=0 to keep all tokens")

    @property
    def greedy(self) -> bool:
        """True when the engine takes the argmax instead of sampling."""
        return self.temperature < GREEDY_EPS

    @property
    def truncates(self) -> bool:
        """True when top_p or top_k removes tokens from the distribution."""
        return self.top_p < 1.0 or self.top_k > 0

    @property
    def full_distribution(self) -> bool:
        """True when samples come from the model's own softmax (temperature 1, no truncation),
        so raw logprobs are exactly the sampling distribution's."""
        return not self.truncates and abs(self.temperature - 1.0) < GREEDY_EPS

    def merged(
        self, temperature: float | None = None, top_p: float | None = None, top_k: int | None = None
    ) -> Sampling:
        """These settings with a request's explicit values laid over them (None keeps ours)."""
        given: dict[str, Any] = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
        return replace(self, **{k: v for k, v in given.items() if v is not None})

    def as_request(self) -> dict[str, Any]:
        """The OpenAI/vLLM request fields, to send explicitly instead of trusting engine defaults."""
        return asdict(self)

    def as_trl(self) -> dict[str, Any]:
        """The GRPOConfig keyword arguments with the same meaning."""
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": max(self.top_k, 0)}


DEFAULT_SAMPLING = Sampling()

#: The published GRPO recipe's sampling, what training AND evaluation of a policy sample with:
#: temperature 0.8 (the reference run's), no truncation (top_p 1.0, top_k off) because the trainer's
#: recomputed logprobs do not model truncation and TRL's training sampling refuses it.
RECIPE_SAMPLING = Sampling(temperature=0.8, top_p=1.0, top_k=0)


SEED_MASK = 0x7FFFFFFF  # vLLM and dagent's engine take any non-negative int; keep it in 31 bits


def call_seed(sample_seed: int, call: int) -> int:
    """The sampling seed of model call `call` of a sample seeded `sample_seed`: one stream per call,
    fixed by the sample, so arms evaluated on the same sample draw the same random numbers (the
    tools loop seeds its turns with it, the capture proxy a harness's calls)."""
    return (sample_seed + call) & SEED_MASK
