"""One rollout's token chain, recovered by observing model calls. Pure: no network, no processes,
no tokenizer.

A black-box harness owns its loop, so the trainer only sees what a capture proxy recorded per model
call: the ENGINE's prompt ids, sampled ids and logprobs (`CapturedTurn`). Nothing is re-rendered
(F01). `analyse` links the calls, measures drift at every link (F02), labels roots by cause (F03),
flags re-rendering harnesses (F04) and selects the one agent chain a trainer may see.

DRIFT (CLEAN / REALIGN / FORK, TRL 1.16's rule) and LINKING (each call's parent by token prefix)
are defined in `dagent.trajectory.linking`; the call record and findings in `dagent.trajectory.turn`.

ROOTS are labelled by cause: `auxiliary` (role_hint title/summary, or no tools offered while other
calls offer them), `subagent` (tools, but a system prompt other than the agent's), `agent` (the
root with the most turns among the rest, and every root sharing its system prompt). The AGENT
CHAIN is the main path (root to deepest leaf) of every agent root, in arrival order; agent turns
off those paths are `discarded` (retries, abandoned branches). Its transitions are re-measured
between consecutive chain turns, which is exactly the list TRL's reconciler is handed.

INVARIANT of `Trajectory.sequences()` (TRL's REALIGN handling, `_SampleBuilder._align_to_prompt`):
the chain splits at every FORK into segments; for a segment with turns t1..tm,
    input_ids == tm.prompt_token_ids + tm.completion_token_ids            (engine ids, exactly)
    every ti.prompt_token_ids is a prefix of input_ids
    ti's completion follows it whole when the next link is CLEAN (so for an all-CLEAN segment
    input_ids[:len(ti end)] == ti.prompt + ti.completion for every i); when it is REALIGN only
    its first (matched - len(ti.prompt)) tokens stay, the drifted tail being REPLACED by the
    engine's tokens of the next prompt, as context
    loss_mask is 1 exactly on retained completion tokens whose turn carries valid logprobs, and
    logprobs there are the engine's; everywhere else loss_mask 0 and logprob 0.0.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Any, Iterable

from dagent.trajectory.linking import (
    CLEAN,
    DEFAULT_FORK_THRESHOLD,
    FORK,
    REALIGN,
    Transition,
    array_drift,
    link_turns,
)
from dagent.trajectory.messages import content_text
from dagent.trajectory.turn import CapturedTurn, Finding, Level

AGENT, AUXILIARY, SUBAGENT, DISCARDED = "agent", "auxiliary", "subagent", "discarded"
AUX_HINTS = frozenset({"title", "summary", "summarizer", "summariser", "compaction", "auxiliary"})
_EMPTY = array("I")


@dataclass(frozen=True)
class Root:
    """A turn that extends no earlier turn: a conversation, or a FORKed piece of one."""

    turn_id: str
    label: str  # "agent" | "auxiliary" | "subagent"
    turn_ids: tuple[str, ...]  # the turns linked under it, arrival order
    forked_from: str | None  # the nearest earlier turn, when it forked from one
    drift: int | None  # drift against that turn


@dataclass(frozen=True)
class Segment:
    """One training sequence: a FORK-free run of the agent chain, flattened. The sequences are
    arrays (ids `array('I')`, mask `array('B')`, logprobs `array('d')`): built by memcpy from the
    turns' arrays, so a rollout of N re-rendered 30k-token calls costs no int objects; `list()`
    them for a trainer. Read-only, like the turns."""

    turn_ids: tuple[str, ...]
    input_ids: array
    loss_mask: array
    logprobs: array
    prompt_len: int  # tokens before the first completion token

    @property
    def n_trainable(self) -> int:
        return self.loss_mask.tobytes().count(1)


@dataclass(frozen=True)
class TrajectoryStats:
    """The figures a report and the gate read. Rates are over the agent chain's transitions."""

    turns: int  # every captured call
    agent_turns: int  # turns in the agent chain
    roots: int
    auxiliary_roots: int  # excluded from training
    subagent_roots: int  # excluded from training
    discarded_turns: int  # agent turns off the chain (retries, abandoned branches)
    transitions: int  # agent_turns - 1
    clean: int
    realign: int
    fork: int
    drift_mean: float
    drift_max: int
    fork_frac: float
    realign_frac: float
    samples_per_rollout: int  # training sequences the agent chain yields (1 = unfragmented)
    trainable_tokens: int


@dataclass(frozen=True)
class Trajectory:
    """The analysis of one rollout. Tuples are aligned with `turns` (sorted by arrival)."""

    turns: tuple[CapturedTurn, ...]
    fork_threshold_tokens: int
    links: tuple[Transition | None, ...]  # per turn: its parent link, FORK for a forked root
    roles: tuple[str, ...]  # per turn: agent | auxiliary | subagent | discarded
    roots: tuple[Root, ...]
    agent_chain: tuple[str, ...]  # turn ids handed to training, in order
    chain_transitions: tuple[Transition, ...]  # between consecutive agent-chain turns
    findings: tuple[Finding, ...]
    stats: TrajectoryStats
    per_turn_capture_only: bool

    @property
    def fatal(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == "fatal")

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    def turn(self, turn_id: str) -> CapturedTurn:
        return next(t for t in self.turns if t.turn_id == turn_id)

    def chain_turns(self) -> list[CapturedTurn]:
        by_id = {t.turn_id: t for t in self.turns}
        return [by_id[i] for i in self.agent_chain]

    def sequences(self) -> tuple[Segment, ...]:
        """The agent chain flattened into training sequences (module docstring: INVARIANT)."""
        return flatten(self.chain_turns(), self.chain_transitions)


def logprobs_ok(turn: CapturedTurn) -> bool:
    lp = turn.logprobs
    return (
        lp is not None
        and len(lp) == len(turn.completion_token_ids)
        and all(map(math.isfinite, lp))
        and (not lp or max(lp) <= 0.0)
    )


def flatten(turns: list[CapturedTurn], transitions: Iterable[Transition | None]) -> tuple[Segment, ...]:
    """Flatten consecutive turns into segments, given the transitions between them (TRL's
    `_SampleBuilder`: FORK, or no link, starts a segment, REALIGN overwrites the drifted tail as context)."""
    segments: list[Segment] = []
    tokens, mask, lps = array("I"), array("B"), array("d")
    ids: list[str] = []
    prompt_len = 0

    def close() -> None:
        if ids:
            segments.append(Segment(tuple(ids), tokens, mask, lps, prompt_len))

    kinds = [None, *transitions]
    for turn, link in zip(turns, kinds):
        prompt = turn.prompt_token_ids if turn.prompt_token_ids is not None else _EMPTY
        if link is None or link.kind == FORK:
            close()
            tokens, mask, lps, ids, prompt_len = array("I"), array("B"), array("d"), [], len(prompt)
            start = 0
        elif link.kind == REALIGN:  # drifted tail of the held completion -> engine tokens, context
            start = link.matched
            del tokens[start:], mask[start:], lps[start:]
        else:
            start = len(tokens)
        n = len(prompt) - start
        tokens += prompt[start:]
        mask.frombytes(bytes(n))  # 0
        lps.frombytes(bytes(8 * n))  # 0.0 (all-zero bits)
        completion = turn.completion_token_ids
        ok = logprobs_ok(turn)
        tokens += completion
        mask.frombytes((b"\x01" if ok else b"\x00") * len(completion))
        if ok:
            assert turn.logprobs is not None  # logprobs_ok checked it
            lps.extend(turn.logprobs)
        else:
            lps.frombytes(bytes(8 * len(completion)))
        ids.append(turn.turn_id)
    close()
    return tuple(segments)


# --- analysis -----------------------------------------------------------------------------------
def _system_text(messages: tuple) -> str | None:
    """The leading system/developer messages' text: the identity of a conversation's role."""
    if not messages:
        return None
    parts = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
            break
        parts.append(content_text(message.get("content")))
    return "\n".join(parts)


def _is_aux(turn: CapturedTurn, any_tools: bool) -> bool:
    hint = (turn.role_hint or "").lower()
    if hint in AUX_HINTS:
        return True
    if hint in (AGENT, SUBAGENT):
        return False
    # Where no call offers tools (a harness parsing tool calls from text), tools carry no signal.
    return any_tools and turn.tools_offered == 0


def _ids(turns: list[CapturedTurn], idx: Iterable[int], limit: int = 5) -> str:
    idx = list(idx)
    shown = ", ".join(turns[i].turn_id for i in idx[:limit])
    return shown + (f", ... (+{len(idx) - limit})" if len(idx) > limit else "")


def analyse(turns: Iterable[CapturedTurn], fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD) -> Trajectory:
    """Link, classify, label and select the agent chain of one rollout's captured turns."""
    ordered = sorted(turns, key=lambda t: t.seq)
    n, thr = len(ordered), fork_threshold_tokens
    if not n:
        empty = Finding(
            "fatal",
            "empty",
            "no model calls were captured: the agent never reached "
            "the proxy (wrong base URL, unreachable engine, rejected key). UNGRADED, "
            "never 0.0 (F07)",
        )
        return Trajectory((), thr, (), (), (), (), (), (empty,), _stats(0, [], {}, [], [], [], 0), False)

    any_tools = any(t.tools_offered > 0 for t in ordered)
    aux = [_is_aux(t, any_tools) for t in ordered]
    parent, links = link_turns(ordered, aux, thr)

    # Trees under each root, depth, and the root's main path (root -> deepest leaf, latest on ties).
    root_of, depth = [0] * n, [0] * n
    members: dict[int, list[int]] = {}
    for k in range(n):
        p = parent[k]
        root_of[k], depth[k] = (root_of[p], depth[p] + 1) if p >= 0 else (k, 0)
        members.setdefault(root_of[k], []).append(k)
    roots = [k for k in range(n) if parent[k] < 0]

    # Labels: aux roots; the agent root (most turns, earliest on ties); the rest by system prompt.
    label = {r: AUXILIARY for r in roots if aux[r]}
    for r in roots:
        if r not in label and (ordered[r].role_hint or "").lower() == SUBAGENT:
            label[r] = SUBAGENT
    open_roots = [r for r in roots if r not in label]
    if open_roots:
        agent_root = max(open_roots, key=lambda r: (len(members[r]), -r))
        agent_system = _system_text(ordered[agent_root].messages)
        for r in open_roots:
            label[r] = AGENT if _system_text(ordered[r].messages) == agent_system else SUBAGENT
    roles = [label[root_of[k]] for k in range(n)]
    chain: list[int] = []
    for r in roots:
        if label[r] == AGENT:
            leaf = max(members[r], key=lambda k: (depth[k], k))
            while leaf >= 0:
                chain.append(leaf)
                leaf = parent[leaf]
    chain.sort()
    on_chain = set(chain)
    for k in range(n):
        if roles[k] == AGENT and k not in on_chain:
            roles[k] = DISCARDED

    # Transitions between consecutive chain turns: the list TRL's reconciler is handed.
    transitions: list[Transition] = []
    for prev, k in zip(chain, chain[1:]):
        a, b = ordered[prev], ordered[k]
        if parent[k] == prev:
            transitions.append(links[k])
        elif a.prompt_token_ids is None or b.prompt_token_ids is None:
            held = len(a.prompt_token_ids or ()) + len(a.completion_token_ids)
            transitions.append(Transition(b.turn_id, a.turn_id, FORK, held, 0))
        else:
            kind, drift, matched = array_drift(a.prompt_token_ids, a.completion_token_ids, b.prompt_token_ids, thr)
            transitions.append(Transition(b.turn_id, a.turn_id, kind, drift, matched))

    root_recs = tuple(
        Root(
            ordered[r].turn_id,
            label[r],
            tuple(ordered[k].turn_id for k in members[r]),
            links[r].parent_id if links[r] else None,
            links[r].drift if links[r] else None,
        )
        for r in roots
    )
    per_turn = n >= 2 and len(roots) == n and sum(not a for a in aux) >= 2
    chain_turns = [ordered[k] for k in chain]
    stats = _stats(n, roots, label, roles, transitions, _trained(chain_turns, transitions), len(chain))
    findings = _findings(ordered, roots, label, roles, chain, transitions, stats, per_turn, thr)
    return Trajectory(
        turns=tuple(ordered),
        fork_threshold_tokens=thr,
        links=tuple(links),
        roles=tuple(roles),
        roots=root_recs,
        agent_chain=tuple(t.turn_id for t in chain_turns),
        chain_transitions=tuple(transitions),
        findings=tuple(findings),
        stats=stats,
        per_turn_capture_only=per_turn,
    )


def _trained(turns: list[CapturedTurn], transitions: list[Transition]) -> list[int]:
    """Trained tokens per segment, as `flatten` would mask them, without touching token ids."""
    per_segment: list[int] = []
    for i, turn in enumerate(turns):
        link = transitions[i - 1] if i else None
        if link is None or link.kind == FORK:
            per_segment.append(0)
        nxt = transitions[i] if i < len(transitions) else None
        kept = len(turn.completion_token_ids)
        if nxt is not None and nxt.kind == REALIGN:
            kept = nxt.matched - len(turn.prompt_token_ids or ())
        per_segment[-1] += kept if logprobs_ok(turn) else 0
    return per_segment


def _stats(
    n: int,
    roots: list[int],
    label: dict[int, str],
    roles: list[str],
    transitions: list[Transition],
    segments: list[int],
    chain_len: int,
) -> TrajectoryStats:
    kinds, drifts, m = [t.kind for t in transitions], [t.drift for t in transitions], len(transitions)
    return TrajectoryStats(
        turns=n,
        agent_turns=chain_len,
        roots=len(roots),
        auxiliary_roots=sum(label[r] == AUXILIARY for r in roots),
        subagent_roots=sum(label[r] == SUBAGENT for r in roots),
        discarded_turns=roles.count(DISCARDED),
        transitions=m,
        clean=kinds.count(CLEAN),
        realign=kinds.count(REALIGN),
        fork=kinds.count(FORK),
        drift_mean=sum(drifts) / m if m else 0.0,
        drift_max=max(drifts, default=0),
        fork_frac=kinds.count(FORK) / m if m else 0.0,
        realign_frac=kinds.count(REALIGN) / m if m else 0.0,
        samples_per_rollout=sum(1 for trained in segments if trained),
        trainable_tokens=sum(segments),
    )


def _findings(
    turns: list[CapturedTurn],
    roots: list[int],
    label: dict[int, str],
    roles: list[str],
    chain: list[int],
    transitions: list[Transition],
    stats: TrajectoryStats,
    per_turn: bool,
    thr: int,
) -> list[Finding]:
    """Per-call contract checks and structure, aggregated per code (a 1,000-call rollout stays
    readable). Each entry: level, code, the calls it concerns, and what to do about it."""
    enum = list(enumerate(turns))
    bad_len = [i for i, t in enum if t.logprobs is not None and len(t.logprobs) != len(t.completion_token_ids)]
    of = lambda lab: [r for r in roots if label[r] == lab]  # noqa: E731
    forks = [t for t in transitions if t.kind == FORK]
    realigns = [t for t in transitions if t.kind == REALIGN]
    small = sum(t.drift < thr for t in forks)
    rules: list[tuple[Level, str, list[Any], str]] = [  # items: call indices, or transitions
        (
            "fatal",
            "missing_prompt_ids",
            [i for i, t in enum if t.prompt_token_ids is None],
            "{n} call(s) carry no engine prompt_token_ids ({ids}): serve with "
            "--return-tokens-as-token-ids and request return_token_ids; never re-render (F01)",
        ),
        (
            "fatal",
            "missing_logprobs",
            [i for i, t in enum if t.logprobs is None and t.completion_token_ids],
            "{n} call(s) sampled tokens without logprobs ({ids}): request logprobs=True; the "
            "importance ratio needs the behaviour policy's logprob of every trained token",
        ),
        (
            "fatal",
            "logprob_length_mismatch",
            bad_len,
            "{n} call(s) carry a logprob count other "
            "than their completion length ({ids}): credit would shift onto the wrong tokens",
        ),
        (
            "fatal",
            "invalid_logprob",
            [i for i, t in enum if t.logprobs is not None and i not in bad_len and not logprobs_ok(t)],
            "{n} call(s) carry non-finite or positive logprobs ({ids})",
        ),
        (
            "fatal",
            "duplicate_turn_id",
            [0] if len({t.turn_id for t in turns}) < len(turns) else [],
            "two calls share a turn_id; ids must be unique",
        ),
        (
            "fatal",
            "no_agent_chain",
            [] if chain else [0],
            "no call belongs to an agent conversation (only auxiliary calls were captured): nothing to train",
        ),
        (
            "warn",
            "per_turn_capture_only",
            roots if per_turn else [],
            "every call is its own root "
            "({n}): the harness re-renders its prompt instead of appending. Tokens and logprobs are "
            "exact; multi-turn credit assignment is lost (F04)",
        ),
        (
            "warn",
            "multiple_roots",
            roots if len(roots) > 1 and not per_turn else [],
            f"{{n}} roots across {len(turns)} calls: {len(of(AGENT))} agent, "
            f"{len(of(AUXILIARY))} auxiliary, {len(of(SUBAGENT))} sub-agent. Only the agent chain "
            "is trained (F03)",
        ),
        (
            "info",
            "auxiliary_root",
            of(AUXILIARY),
            "{n} auxiliary root(s) excluded from training (title/summary or tool-less calls: {ids})",
        ),
        (
            "warn",
            "subagent_root",
            of(SUBAGENT),
            "{n} sub-agent root(s) excluded from training (tools, another system prompt: {ids})",
        ),
        (
            "warn",
            "discarded_turns",
            [k for k, r in enumerate(roles) if r == DISCARDED],
            "{n} agent call(s) off the chain (retries or abandoned branches: {ids}); not trained",
        ),
        (
            "warn",
            "fork",
            forks,
            f"{{n}} of {len(transitions)} agent-chain transition(s) fork "
            f"(max drift {max((t.drift for t in forks), default=0)}, threshold {thr})"
            + (
                f"; {small} drift less than the threshold but reach into the previous call's prompt "
                "(e.g. a re-rendered generation prompt), which TRL's reconciler cannot realign"
                if small
                else ""
            )
            + f": one conversation becomes {stats.samples_per_rollout} training sequences (F02)",
        ),
        (
            "info",
            "realign",
            realigns,
            "{n} transition(s) realign (drift max "
            f"{max((t.drift for t in realigns), default=0)} < {thr}): the drifted completion tail "
            "is replaced by the engine's re-rendered tokens, as context, as TRL does",
        ),
        (
            "warn",
            "truncated_turn",
            [k for k in chain if turns[k].finish_reason == "length"],
            "{n} agent call(s) stopped on the output-token cap ({ids}): their endings are artefacts",
        ),
    ]
    return [
        Finding(
            level,
            code,
            text.format(n=len(items), ids=_ids(turns, items) if items and isinstance(items[0], int) else ""),
        )
        for level, code, items, text in rules
        if items
    ]
