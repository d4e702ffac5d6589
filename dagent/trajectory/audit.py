"""The round-trip audit (F01): what re-rendering prompts locally would have cost. Pure: the renderer
is passed in, this module imports no tokenizer.

A trainer that re-tokenises `messages` with a chat template trains on a token string the model may
never have seen. Qwen3's template drops `<think>` blocks of earlier assistant turns, so the render of
turn k is not the engine's prompt and not an extension of what the model produced at turn k-1; the
run collapses with no error. The capture keeps the engine's ids precisely so this is never needed;
the audit measures, per captured call, what it would have cost:

    exact             render(messages, tools) == the engine's prompt_token_ids
    first_diff        their common prefix length (the index of the first differing token)
    mismatched_prompt positions from first_diff to the longer end: context the trainer would
                      condition on wrongly
    wrongly_trained   the call's completion tokens when not exact: each would be trained under a
                      context that differs from the one the engine scored it in
    fragments         render(k) is not a prefix-extension of render(k-1) + completion(k-1), the
                      sequence a re-rendering trainer holds after k-1; `drift`/`kind` measure it
                      with TRL's rule (`dagent.trajectory.measure_drift`)

INVARIANT: a renderer that reproduces the engine exactly and is prefix-preserving (TRL's
`*_training.jinja` templates) yields `clean`; any difference is reported per call, never raised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagent.trajectory.analysis import Trajectory
from dagent.trajectory.linking import CLEAN, DEFAULT_FORK_THRESHOLD, common_prefix_len, measure_drift
from dagent.trajectory.turn import CapturedTurn, Finding

Render = Callable[[list[dict[str, Any]], "list[dict[str, Any]] | None"], Sequence[int]]


@dataclass(frozen=True)
class TurnAudit:
    """One call: the local render against the engine's prompt ids."""

    turn_id: str
    engine_len: int | None  # None: the engine returned no prompt ids (nothing to compare)
    rendered_len: int | None  # None: the renderer raised
    exact: bool
    first_diff: int | None
    mismatched_prompt: int
    wrongly_trained: int
    fragments: bool  # re-rendering would break the chain at this call
    drift: int | None  # against render(k-1) + completion(k-1); None for the first call
    kind: str | None  # "clean" | "realign" | "fork"
    error: str | None = None


@dataclass(frozen=True)
class AuditReport:
    """Every call's audit and the totals."""

    turns: tuple[TurnAudit, ...]
    exact_match_frac: float
    mismatched_prompt_tokens: int
    wrongly_trained_tokens: int
    fragmented_transitions: int
    findings: tuple[Finding, ...]

    @property
    def clean(self) -> bool:
        """Re-rendering would have reproduced every engine prompt and kept the chain whole."""
        return not self.findings


def _ids(rendered: Any) -> tuple[int, ...]:
    if isinstance(rendered, Mapping):
        rendered = rendered["input_ids"]
    return tuple(int(i) for i in rendered)


def audit(
    turns: Sequence[CapturedTurn] | Trajectory,
    render: Render,
    *,
    fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD,
) -> AuditReport:
    """Render every call's messages locally and compare with the engine (a Trajectory: its agent
    chain). `render(messages, tools)` must add the generation prompt, as the engine does."""
    if isinstance(turns, Trajectory):
        fork_threshold_tokens = turns.fork_threshold_tokens
        turns = turns.chain_turns()
    audits: list[TurnAudit] = []
    held: tuple[tuple[int, ...], Sequence[int]] | None = None  # rendered prompt, engine completion
    for turn in turns:
        engine = turn.prompt_token_ids
        try:
            rendered = _ids(render([dict(m) for m in turn.messages], list(turn.tools) if turn.tools else None))
        except Exception as exc:  # noqa: BLE001 - a template that raises IS the finding
            audits.append(
                TurnAudit(
                    turn.turn_id,
                    None if engine is None else len(engine),
                    None,
                    False,
                    None,
                    0,
                    0,
                    held is not None,
                    None,
                    None,
                    f"{type(exc).__name__}: {str(exc)[:200]}",
                )
            )
            held = None
            continue
        if engine is None:
            exact, first, mismatched = False, None, 0
        else:
            first = common_prefix_len(rendered, engine)
            exact = first == len(rendered) == len(engine)
            mismatched = max(len(rendered), len(engine)) - first
        kind = drift = None
        if held is not None:
            kind, drift, _ = measure_drift(held[0], held[1], rendered, fork_threshold_tokens)
        audits.append(
            TurnAudit(
                turn.turn_id,
                None if engine is None else len(engine),
                len(rendered),
                exact,
                first,
                mismatched,
                0 if exact else len(turn.completion_token_ids),
                kind is not None and kind != CLEAN,
                drift,
                kind,
            )
        )
        held = (rendered, turn.completion_token_ids)
    return _report(tuple(audits))


def _report(audits: tuple[TurnAudit, ...]) -> AuditReport:
    compared = [a for a in audits if a.engine_len is not None and a.rendered_len is not None]
    mismatched = [a for a in compared if not a.exact]
    fragments = [a for a in audits if a.fragments]
    errors = [a for a in audits if a.error]
    findings: list[Finding] = []

    def named(items: list[TurnAudit]) -> str:
        return ", ".join(a.turn_id for a in items[:5]) + (" ..." if len(items) > 5 else "")

    if mismatched:
        findings.append(
            Finding(
                "warn",
                "render_mismatch",
                (
                    f"{len(mismatched)} of {len(compared)} call(s) render to ids other than the engine's "
                    f"({named(mismatched)}; first difference at token {mismatched[0].first_diff}): "
                    f"{sum(a.wrongly_trained for a in mismatched)} completion token(s) would be trained "
                    "under a context the model never saw. Keep the engine's prompt_token_ids (F01)."
                ),
            )
        )
    if fragments:
        findings.append(
            Finding(
                "warn",
                "render_fragments",
                (
                    f"re-rendering breaks the chain at {len(fragments)} call(s) ({named(fragments)}; "
                    f"drift max {max(a.drift or 0 for a in fragments)}): the render of a call does not "
                    "extend the previous render plus its completion (e.g. history <think> dropped)."
                ),
            )
        )
    if errors:
        findings.append(
            Finding(
                "warn",
                "render_error",
                (f"the renderer raised on {len(errors)} call(s) ({named(errors)}): {errors[0].error}"),
            )
        )
    return AuditReport(
        turns=audits,
        exact_match_frac=(len(compared) - len(mismatched)) / len(compared) if compared else 0.0,
        mismatched_prompt_tokens=sum(a.mismatched_prompt for a in compared),
        wrongly_trained_tokens=sum(a.wrongly_trained for a in compared),
        fragmented_transitions=len(fragments),
        findings=tuple(findings),
    )
