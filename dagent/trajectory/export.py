"""An analysed trajectory in the formats trainers consume. Pure: plain dicts out; openenv is imported
only to build its typed `TrainingTrace`.

TRL (loop-owning `HarnessRolloutWorker`): `to_trace_entries` gives one OpenEnv `TraceEntry` per
AGENT-CHAIN call, in chain order, carrying the engine's `prompt_token_ids`, `completion_token_ids`,
`per_token_logps` and a `loss_mask` over prompt + completion (prompt positions 0, completion 1; 0
for a call whose logprobs are unusable), with a unique `metadata.node_id` (the turn id).
`to_training_trace` validates them into `openenv.core.harness.TrainingTrace`, which TRL turns into
training sequences with `_turns_from_training_trace` + `_chain_to_sequences`. Per-call masks are the
capture's, not reconciled: TRL re-runs its own reconciler with its own `fork_threshold_tokens` and,
given the same threshold, yields exactly `Trajectory.sequences()`. Auxiliary, sub-agent and
discarded calls are never exported, so no `agent_turn_fn` is needed (F03).

OpenEnv rollout document (`export_session`'s shape, `GET /sessions/{id}/rollout`):
`to_rollout_document` gives `sequences` rows labelled by role: one `agent` row per training segment
of the agent chain (reconciled with the trajectory's threshold, so masks are authoritative), and one
`auxiliary` row per other root's main path (its own `label` says auxiliary or subagent: OpenEnv
would label a tool-carrying sub-agent `agent` and train it). `trainable` is the gate's verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dagent.errors import CaptureError, MissingDependencyError
from dagent.trajectory.analysis import AGENT, DISCARDED, Segment, Trajectory, flatten, logprobs_ok
from dagent.trajectory.gate import gate
from dagent.trajectory.linking import FORK
from dagent.trajectory.turn import CapturedTurn

if TYPE_CHECKING:
    from openenv.core.harness import TrainingTrace


def _entry(turn: CapturedTurn, role: str, link: Any) -> dict[str, Any]:
    prompt = list(turn.prompt_token_ids or ())
    completion = list(turn.completion_token_ids)
    ok = logprobs_ok(turn)
    logprobs = turn.logprobs if ok else None
    return {
        "request": {"messages": [dict(m) for m in turn.messages], "tools": list(turn.tools) if turn.tools else None},
        "response": {
            "choices": [
                {"message": dict(turn.metadata.get("response_message") or {}), "finish_reason": turn.finish_reason}
            ]
        },
        "prompt_token_ids": prompt,
        "completion_token_ids": completion,
        "per_token_logps": [float(x) for x in logprobs] if logprobs is not None else [],
        "loss_mask": [0] * len(prompt) + [1 if ok else 0] * len(completion),
        "metadata": {
            "node_id": turn.turn_id,
            "index": turn.seq,
            "session_id": turn.session_id,
            "n_tools": turn.tools_offered,
            "role": role,
            "role_hint": turn.role_hint,
            "transition": None if link is None else {"parent": link.parent_id, "kind": link.kind, "drift": link.drift},
        },
    }


def to_trace_entries(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The agent chain as OpenEnv `TraceEntry` dicts, in chain order (what TRL consumes)."""
    turns = trajectory.chain_turns()
    links = [None, *trajectory.chain_transitions]
    return [_entry(turn, AGENT, link) for turn, link in zip(turns, links)]


def to_capture_log(trajectory: Trajectory) -> list[dict[str, Any]]:
    """EVERY captured call (agent chain, auxiliary, sub-agent, discarded) as `TraceEntry` dicts in
    arrival order, each with its role, role hint and parent link: the file a recorded rollout
    keeps (`trace.jsonl`, one entry a line). `turns_from_openenv` reads it back, and `analyse` of
    what it reads gives the same roots, chain and findings (tests/trajectory/test_export.py)."""
    return [_entry(turn, role, link) for turn, role, link in zip(trajectory.turns, trajectory.roles, trajectory.links)]


def to_training_trace(trajectory: Trajectory) -> TrainingTrace:
    """The agent chain as OpenEnv's strict `TrainingTrace` (TRL's `fetch_training_trace()` value).

    Raises:
        CaptureError: the trajectory has a fatal finding (e.g. missing prompt ids); fix the capture,
            never re-render to fill the gap.
    """
    if trajectory.fatal:
        raise CaptureError(
            "cannot build a training trace from a capture with fatal findings: "
            + "; ".join(str(f) for f in trajectory.fatal)
        )
    try:
        from openenv.core.harness import TrainingTrace
    except ImportError as exc:
        raise MissingDependencyError("openenv", purpose="TRL's TrainingTrace") from exc
    return TrainingTrace.from_entries(to_trace_entries(trajectory))


def _main_path(trajectory: Trajectory, members: Any) -> list[int]:
    """Indices of a root's path to its deepest call (latest on ties)."""
    index = {t.turn_id: i for i, t in enumerate(trajectory.turns)}
    members = set(members)
    depth: dict[int, int] = {}
    parent: dict[int, int] = {}
    for tid in members:
        k, link = index[tid], trajectory.links[index[tid]]
        if link is not None and link.kind != FORK and link.parent_id in members:
            parent[k] = index[link.parent_id]
        depth[k] = depth[parent[k]] + 1 if k in parent else 0
    leaf = max(depth, key=lambda k: (depth[k], k))
    path = [leaf]
    while path[-1] in parent:
        path.append(parent[path[-1]])
    return path[::-1]


def _row(segment: Segment, role: str, label: str, trainable: bool) -> dict[str, Any]:
    return {
        "role": role,
        "label": label,
        "root_id": segment.turn_ids[0],
        "node_ids": list(segment.turn_ids),
        "n_turns": len(segment.turn_ids),
        "prompt_len": segment.prompt_len,
        "n_trainable": segment.n_trainable if trainable else 0,
        "turn_lengths": _runs(segment.loss_mask),
        "input_ids": list(segment.input_ids),
        "loss_mask": list(segment.loss_mask),
        "logprobs": list(segment.logprobs),
        "trainable": trainable,
        "validation": [],
    }


def _runs(mask: Iterable[int]) -> list[int]:
    lengths, run = [], 0
    for m in mask:
        if m:
            run += 1
        elif run:
            lengths.append(run)
            run = 0
    return lengths + ([run] if run else [])


def to_rollout_document(trajectory: Trajectory, *, include_messages: bool = False) -> dict[str, Any]:
    """The rollout as OpenEnv's rollout document (see `openenv...capture.export.export_session`)."""
    verdict = gate(trajectory)
    turns = trajectory.turns
    rows = [_row(s, AGENT, AGENT, verdict.trainable) for s in trajectory.sequences()]
    for root in trajectory.roots:
        if root.label == AGENT:
            continue
        path = _main_path(trajectory, root.turn_ids)
        path_turns = [turns[k] for k in path]
        for segment in flatten(path_turns, [trajectory.links[k] for k in path[1:]]):
            rows.append(_row(segment, "auxiliary", root.label, False))
    root_of = {tid: root.turn_id for root in trajectory.roots for tid in root.turn_ids}
    has_ids = all(t.prompt_token_ids is not None for t in turns)
    return {
        "session_id": turns[0].session_id if turns else "",
        "metadata": {
            "producer": "dagent",
            "fork_threshold_tokens": trajectory.fork_threshold_tokens,
            "per_turn_capture_only": trajectory.per_turn_capture_only,
            "gate": verdict.tier,
            "samples_per_rollout": verdict.samples_per_rollout,
        },
        "budget_stop_count": 0,
        "turns": [
            {
                "node_id": t.turn_id,
                "index": t.seq,
                "root_id": root_of.get(t.turn_id, t.turn_id),
                "role": role,
                "n_sampled": len(t.completion_token_ids),
                "n_prompt": len(t.prompt_token_ids or ()),
                "n_tools": t.tools_offered,
                "finish_reason": t.finish_reason,
                "harness_session_id": t.metadata.get("harness_session_id"),
                "sampling_params": dict(t.metadata.get("sampling_params") or {}),
                "requested_sampling_params": {},
                "sampled_logprobs": list(t.logprobs) if t.logprobs is not None else None,
                "discarded": role == DISCARDED,
                **(
                    {
                        "request_messages": [dict(m) for m in t.messages],
                        "request_tools": list(t.tools) if t.tools else None,
                        "response_message": dict(t.metadata.get("response_message") or {}),
                    }
                    if include_messages
                    else {}
                ),
            }
            for t, role in zip(turns, trajectory.roles)
        ],
        "stats": {
            "n_turns": len(turns),
            "n_roots": len(trajectory.roots),
            "n_leaves": len(rows),
            "n_forks": trajectory.stats.fork,
            "n_discarded": trajectory.stats.discarded_turns,
            "n_sequences": len(rows),
            "n_trainable_sequences": sum(r["trainable"] for r in rows),
            "n_trainable_tokens": sum(r["n_trainable"] for r in rows),
        },
        "sequences": rows,
        "validation": [str(f) for f in trajectory.findings],
        "trainable": verdict.trainable,
        "capture_level": "tokens" if has_ids else "text",
        "rollout_type": "train" if has_ids else "eval",
    }
