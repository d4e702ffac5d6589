"""The batch as the sampler built it, and what the direction check reads from it: its `Record`
(ids, attention masks and the loss mask, taken before anything downstream could touch them),
`audit` (the tokens the loss trains are the sampler's, at the same positions, and no others),
`rows` (a batch cut to some rollouts, columns that are padding everywhere dropped) and
`token_logps` (each completion token's log-prob under a model, at the sampling temperature)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["PROMPT_KEYS", "Record", "audit", "rows", "token_logps"]


@dataclass(frozen=True)
class Record:
    """What the sampler produced, as the batch held it when built: ids, attention masks, and the
    loss mask (completion mask x tool/env mask: 1 on the model's own tokens)."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    loss_mask: torch.Tensor

    @classmethod
    def of(cls, batch: dict[str, Any]) -> Record:
        mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
        return cls(
            *(
                t.detach().clone()
                for t in (
                    batch["prompt_ids"],
                    batch["prompt_mask"],
                    batch["completion_ids"],
                    batch["completion_mask"],
                    mask,
                )
            )
        )

    @property
    def rollouts(self) -> int:
        return int(self.completion_ids.shape[0])

    def rows(self, keep: Sequence[int]) -> Record:
        """The record cut to rollouts `keep`, without the columns that are padding in all of them."""
        index = torch.tensor(list(keep))
        pi, pm, ci, cm, lm = (
            t.index_select(0, index.to(t.device))
            for t in (self.prompt_ids, self.prompt_mask, self.completion_ids, self.completion_mask, self.loss_mask)
        )
        start, end = _bounds(pm, cm)
        return Record(pi[:, start:], pm[:, start:], ci[:, :end], cm[:, :end], lm[:, :end])

    def untrained_tokens(self) -> int:
        """Completion tokens the loss must not train (tool output, realigned context), padding excluded."""
        return int(((self.completion_mask == 1) & (self.loss_mask == 0)).sum())


def token_logps(model: Any, record: Record, temperature: float = 1.0) -> torch.Tensor:
    """Per-token log-probs of the record's completion ids (B x T) at the sampling temperature (what
    GRPO's loss trains: TRL divides the logits by it), the model in eval mode, no sampling, no
    gradient; the model's mode is restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            ids = torch.cat([record.prompt_ids, record.completion_ids], dim=1)
            attention = torch.cat([record.prompt_mask, record.completion_mask], dim=1)
            t = record.completion_ids.shape[1]
            logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=t + 1).logits[:, :-1, :].float()
            return (
                torch.log_softmax(logits / temperature, dim=-1)
                .gather(-1, record.completion_ids.unsqueeze(-1))
                .squeeze(-1)
            )
    finally:
        model.train(was_training)


def audit(batch: dict[str, Any], record: Record) -> list[str]:
    """Where the batch the loss sees differs from what the sampler produced: per rollout, the
    trained tokens (ids under the loss mask, with their positions) must be the record's."""
    seen = Record.of(batch)
    problems = []
    for i in range(record.rollouts):
        want = record.loss_mask[i].bool()
        got = seen.loss_mask[i].bool() if i < seen.rollouts else torch.zeros_like(want)
        if seen.completion_ids.shape != record.completion_ids.shape or not torch.equal(
            seen.prompt_ids[i], record.prompt_ids[i]
        ):
            problems.append(f"rollout {i}: the row's prompt or completion is not the sampler's")
            continue
        if not torch.equal(got, want):
            extra, lost = int((got & ~want).sum()), int((want & ~got).sum())
            problems.append(
                f"rollout {i}: the loss mask trains {extra} tokens the sampler did not produce as "
                f"the model's and leaves {lost} of the model's untrained"
            )
            continue
        if not torch.equal(seen.completion_ids[i][want], record.completion_ids[i][want]):
            n = int((seen.completion_ids[i][want] != record.completion_ids[i][want]).sum())
            problems.append(f"rollout {i}: {n} trained tokens differ from the ones the sampler produced")
    return problems


def _bounds(prompt_mask: torch.Tensor, completion_mask: torch.Tensor) -> tuple[int, int]:
    """(first prompt column, end of the completion columns) holding a token of any row: prompts are
    padded on the left, completions on the right."""
    used = prompt_mask.any(0).nonzero()
    start = int(used[0]) if len(used) else prompt_mask.shape[1]
    used = completion_mask.any(0).nonzero()
    return start, int(used[-1]) + 1 if len(used) else 0


PROMPT_KEYS = ("prompt_ids", "prompt_mask")


def rows(batch: dict[str, Any], keep: Sequence[int]) -> dict[str, Any]:
    """The batch cut to rollouts `keep`: every tensor whose first dimension is the batch's is sliced,
    everything else (the generation batch's token count, the loss's normaliser) kept as it is; the
    columns that are padding in every kept row are dropped (a rotary model's log-probs do not
    depend on left padding, and a short prompt padded to a harness's 6,000-token one costs as much)."""
    n = int(batch["advantages"].shape[0])
    index = torch.tensor(list(keep))
    out = {
        k: v.index_select(0, index.to(v.device)) if torch.is_tensor(v) and v.dim() and v.shape[0] == n else v
        for k, v in batch.items()
    }
    width = batch["completion_ids"].shape[1]
    start, end = _bounds(out["prompt_mask"], out["completion_mask"])
    for k, v in out.items():
        if not torch.is_tensor(v) or v.dim() < 2 or v.shape[0] != len(keep):
            continue
        if k in PROMPT_KEYS:
            out[k] = v[:, start:]
        elif v.shape[1] == width:
            out[k] = v[:, :end]
    return out
