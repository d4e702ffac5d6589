"""White-box generation on a CPU through dagent's local engine, from the module the trainer optimises.

TRL 1.16 generates each turn of its tool loop with transformers' `generate` where vLLM is absent:
the turn's rows are left-padded into one batch and decoded together until the LAST of them stops
(a row that ended at its end-of-sequence token still computes every step of the longest), and the
second turn prefills the whole conversation again, though a GRPO group's rows share their prompt
and every row's first turn was computed a moment before. TRL's other CPU path,
`use_transformers_continuous_batching`, ran slower still on a CPU (paged attention in float32).

`generate_through_engine(trainer)` replaces the trainer's `_generate_single_turn` (every turn of
the tool loop) with `dagent.engine`'s continuous batching over the SAME module: finished rows
leave the batch, a prompt already computed (a group's shared prompt, a row's previous turn) is
copied from the prefix cache instead of recomputed, and no row is padded. Measured side by side in
`benchmarks/train.py --generation transformers|engine`.

INVARIANTS
- On-policy: the engine reads the live parameters at every forward pass; the prefix cache is
  emptied at the first turn after an optimizer step (the trainer's `global_step` moved), so no key
  or value computed under weights since replaced is reused, while the turns of one step share it
  (a row's second turn prefills only the tool result and what follows). F06: the same module, the
  same dtype, nothing copied or synced.
- The same distribution TRL samples from: the turn's `sequence_bias` (transformers' own
  `SequenceBiasLogitsProcessor`, over each row's ids so far), then its temperature, top-k and top-p
  (applied in that order, as transformers does); a setting the engine does not implement (min_p, a
  repetition penalty, beams) sends the turn to TRL's own generation, with a warning naming it,
  never silently dropped.
- The same output: each row's sampled ids up to and including its first end-of-sequence id (the
  ids TRL keeps after its mask), at most `max_new_tokens` of them; logprobs None, as TRL's
  transformers path returns (the loss computes its own).
- Repeatable: each row's sampler is seeded from torch's global generator (which the trainer
  seeds, saves in a checkpoint and restores on resume), so a seeded run draws the same tokens again.
- Multimodal turns (images) go to TRL's own generation.
"""

from __future__ import annotations

import warnings
from typing import Any

from dagent.core.sampling import Sampling
from dagent.engine.generation import GenerationRequest, LocalEngine
from dagent.train.trl_seams import GENERATE_TURN, wrap_method

METHOD = GENERATE_TURN


# What transformers' generate may be given that the engine honours (sampling) or that does not
# change what is sampled (ids, bookkeeping). Anything else (a logits processor such as
# sequence_bias, min_p, a repetition penalty, beams) sends the turn to TRL's own generation.
_HONOURED = frozenset(
    {
        "max_new_tokens",
        "do_sample",
        "temperature",
        "top_k",
        "top_p",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "disable_compile",
        "transformers_version",
        "cache_implementation",
        "use_cache",
        "sequence_bias",
    }
)
_NEUTRAL = {"repetition_penalty": (1.0,), "min_p": (None, 0.0)}


def unhonoured(config: Any) -> list[str]:
    """The settings of a transformers `GenerationConfig` (those differing from its defaults) that the
    engine would not honour."""
    diff = config.to_diff_dict() if hasattr(config, "to_diff_dict") else dict(vars(config))
    return sorted(k for k, v in diff.items() if k not in _HONOURED and not (k in _NEUTRAL and v in _NEUTRAL[k]))


def engine_sampling(config: Any) -> Any:
    """The engine's `Sampling` for a transformers `GenerationConfig`; None where the config asks
    for something the engine does not implement (then TRL generates the turn itself)."""
    if unhonoured(config):
        return None
    if not getattr(config, "do_sample", True):
        return Sampling(temperature=0.0)
    return Sampling(
        temperature=float(config.temperature if config.temperature is not None else 1.0),
        top_p=float(config.top_p if config.top_p is not None else 1.0),
        top_k=int(config.top_k or 0),
    )


def logits_processor(config: Any) -> Any:
    """`(ids, logits) -> logits` for the config's `sequence_bias` (transformers' own processor over
    one row), or None where it sets none."""
    bias = getattr(config, "sequence_bias", None)
    if not bias:
        return None
    import torch
    from transformers.generation.logits_process import SequenceBiasLogitsProcessor

    processor = SequenceBiasLogitsProcessor(sequence_bias=bias)

    def apply(ids: list[int], logits: Any) -> Any:
        return processor(torch.tensor([ids], device=logits.device), logits[None].clone())[0]

    return apply


def generate_through_engine(trainer: Any, *, max_num_seqs: int = 16) -> bool:
    """Replace `trainer._generate_single_turn` with the local engine over the trainer's module (an
    instance attribute; TRL's class untouched). Returns whether it was replaced (False: this TRL
    has no such method, the trainer generates with vLLM, or its module is on an accelerator: the
    engine serves CPU modules, and TRL's generation runs there)."""
    if getattr(trainer, "use_vllm", False) or _on_accelerator(trainer):
        return False

    def wrap(method: Any) -> Any:
        engine = _Engine(trainer, max_num_seqs)

        def turn(
            prompt_ids: Any, images: Any, multimodal_fields: Any, num_generations: int, has_tool_images: bool = False
        ) -> Any:
            sampling = engine_sampling(trainer.generation_config)
            if images is not None and any(images) or multimodal_fields or has_tool_images or sampling is None:
                if sampling is None and not turn.warned:
                    turn.warned = True
                    warnings.warn(
                        f"white-box generation: the engine does not implement "
                        f"{', '.join(unhonoured(trainer.generation_config))}; TRL's generation runs these "
                        "turns",
                        stacklevel=2,
                    )
                return method(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=has_tool_images)
            return engine.generate(
                [list(p) for p in prompt_ids],
                sampling,
                int(trainer.generation_config.max_new_tokens),
                logits_processor(trainer.generation_config),
            ), None

        turn.warned = False  # type: ignore[attr-defined]
        turn.engine = engine  # type: ignore[attr-defined]
        return turn

    return wrap_method(trainer, METHOD, "_dagent_engine", wrap)


def _on_accelerator(trainer: Any) -> bool:
    model = getattr(trainer, "model", None)
    parameters = getattr(model, "parameters", None)
    first = next(iter(parameters()), None) if callable(parameters) else None
    return first is not None and first.device.type != "cpu"


class _Engine:
    """A `LocalEngine` over the trainer's unwrapped module, built on first use."""

    def __init__(self, trainer: Any, max_num_seqs: int) -> None:
        self.trainer, self.max_num_seqs = trainer, max_num_seqs
        self._engine: Any = None
        self._step: int | None = None  # the optimizer step whose weights the prefix cache holds

    def _local(self) -> Any:
        model = self.trainer.accelerator.unwrap_model(self.trainer.model_wrapped)
        if self._engine is None or self._engine.model is not model:
            eos = tuple(int(i) for i in self.trainer.eos_token_ids)
            self._engine = LocalEngine(
                model,
                self.trainer.processing_class,
                eos_token_ids=eos,
                max_model_len=int(getattr(model.config, "max_position_embeddings", 32_768)),
                dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
                name="trainer",
                max_num_seqs=self.max_num_seqs,
            )
        return self._engine

    def generate(
        self, prompts: list[list[int]], sampling: Any, max_new_tokens: int, processor: Any = None
    ) -> list[list[int]]:
        import torch

        if not prompts:
            return []
        engine = self._local()
        step = int(self.trainer.state.global_step)
        if step != self._step:  # an optimizer step replaced the weights the cached keys/values came from
            prefix = getattr(engine.backend, "prefix", None)
            if prefix is not None:
                prefix.clear()
            self._step = step
        seeds = torch.randint(0, 2**31 - 1, (len(prompts),)).tolist()  # torch's global generator: the trainer's seed
        requests = [
            GenerationRequest(
                prompt_ids=tuple(p),
                max_tokens=max_new_tokens,
                sampling=sampling,
                seed=int(s),
                skip_special_tokens=False,
                logits_processor=processor,
            )
            for p, s in zip(prompts, seeds, strict=True)
        ]
        model = engine.model
        was_training = model.training
        model.eval()
        try:
            generations = engine.run_here(requests)
        finally:
            model.train(was_training)
        return [_through_first_eos(g.token_ids, engine.eos_token_ids, max_new_tokens) for g in generations]


def _through_first_eos(ids: list[int], eos: tuple[int, ...], limit: int) -> list[int]:
    for i, token in enumerate(ids[:limit]):
        if token in eos:
            return ids[: i + 1]
    return ids[:limit]
