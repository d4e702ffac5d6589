"""One rollout's token chain, recovered by observing model calls. Pure: no network, no processes,
no tokenizer.

A black-box harness owns its loop, so the trainer only sees what a capture proxy recorded per model
call: the ENGINE's prompt ids, sampled ids and logprobs (`CapturedTurn`). Nothing is re-rendered
(F01). `analyse` links the calls, measures drift at every link (F02), labels roots by cause (F03),
flags re-rendering harnesses (F04) and selects the one agent chain a trainer may see.

DRIFT is TRL 1.16's (`_SampleBuilder.classify_token_drift`, trl/experimental/async_grpo/
async_rollout_worker.py). For a parent p and a later turn k:

    held    = p.prompt_token_ids + p.completion_token_ids
    matched = common_prefix_len(held, k.prompt_token_ids)
    drift   = len(held) - matched      # p's tokens that k's prompt does not reproduce at its start

    CLEAN    drift == 0
    REALIGN  0 < drift < fork_threshold_tokens and matched >= len(p.prompt_token_ids)
             (strict `<`, and the change must lie inside p's COMPLETION, exactly as TRL)
    FORK     otherwise: k starts a new root, i.e. a new training sequence

LINKING. Auxiliary calls link only to auxiliary calls, the rest only to the rest. Of the earlier
turns whose link to k would be CLEAN or REALIGN, k's parent is the one sharing the longest prefix
with k's prompt (ties: smaller drift, then latest). An exact-prefix parent (drift 0) is therefore
the deepest one, and a REALIGN onto the call just before k beats an exact link to its grandparent
(a messages-reconstructing harness stays one chain). With no such turn, k is a root; its link keeps
the candidate with the smallest drift, for the report. Candidates are the open chain tips whose
prompt starts with k's first HEAD tokens (a CLEAN or REALIGN parent's prompt is always a prefix of
k's), at most MAX_TIPS per head (one, for an appending client), plus the best tip's deepest
exact-prefix ancestor and its child, found through skew-binary jump pointers in O(log turns). Each
candidate costs one C-level prefix compare that stops at the first difference: one pass over each
prompt in the common case, O(MAX_TIPS x total tokens) at worst, never quadratic in turns (OpenEnv's
graph walks every earlier call for every call).

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
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Iterable, Literal, Sequence

CLEAN, REALIGN, FORK = "clean", "realign", "fork"
AGENT, AUXILIARY, SUBAGENT, DISCARDED = "agent", "auxiliary", "subagent", "discarded"
AUX_HINTS = frozenset({"title", "summary", "summarizer", "summariser", "compaction", "auxiliary"})
DEFAULT_FORK_THRESHOLD = 1024  # TRL's `fork_threshold_tokens` default
HEAD = 32  # prompt tokens that key the candidate index
MAX_TIPS = 16  # open chain tips kept per head

Level = Literal["info", "warn", "fatal"]


@dataclass(frozen=True)
class Finding:
    """One structured observation. `fatal` means the rollout must not be trained."""

    level: Level
    code: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.level.upper()}] {self.code}: {self.detail}"


@dataclass(frozen=True)
class CapturedTurn:
    """One observed model call, with the engine's own token ids. Sequences are stored as tuples."""

    turn_id: str  # unique within the trajectory
    session_id: str  # the capture session (= rollout) it was recorded under
    seq: int  # order of arrival at the proxy
    prompt_token_ids: tuple[int, ...] | None  # None: the engine returned none
    completion_token_ids: tuple[int, ...]  # the sampled ids
    logprobs: tuple[float, ...] | None  # one per completion token; None: none returned
    messages: tuple[dict[str, Any], ...] = ()  # the request's messages, plain JSON
    tools_offered: int = 0  # tools in the request; 0 = tool-less
    finish_reason: str | None = None
    role_hint: str | None = None  # a harness's own label: "title", "summary", "agent", ...
    metadata: dict[str, Any] = field(default_factory=dict)
    tools: tuple[dict[str, Any], ...] | None = None  # the request's tool schemas (for audits)

    def __post_init__(self) -> None:
        for name in ("prompt_token_ids", "completion_token_ids", "logprobs", "messages", "tools"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.completion_token_ids is None:
            object.__setattr__(self, "completion_token_ids", ())
        if type(self.tools_offered) is not int or self.tools_offered < 0:
            raise ValueError(f"turn {self.turn_id}: tools_offered must be a non-negative int")

    @classmethod
    def from_openenv(
        cls, item: Any, *, session_id: str = "", seq: int | None = None
    ) -> "CapturedTurn":
        """Convert OpenEnv's `TurnNode` (a capture session's graph node) or a `TraceEntry` dict
        (`/sessions/{id}/trace_entries`, `to_trace_entries`). OpenEnv writes missing ids as `[]`
        and rejected logprobs as `None`/`[]`; both become `None` here, so they are reported."""
        if isinstance(item, dict):
            meta = dict(item.get("metadata") or {})
            request = item.get("request") or {}
            choice = ((item.get("response") or {}).get("choices") or [{}])[0]
            fields = (meta.get("node_id") or f"{session_id}:{seq}", meta.get("index", 0),
                      item.get("prompt_token_ids"), item.get("completion_token_ids"),
                      item.get("per_token_logps"), request.get("messages"), request.get("tools"),
                      meta.get("n_tools"), choice.get("finish_reason"), meta)
        else:
            meta = {"model": item.model, "harness_session_id": item.harness_session_id,
                    "sampling_params": dict(item.sampling_params or {}),
                    "response_message": dict(item.response_message or {})}
            fields = (item.node_id, item.index, item.prompt_ids, item.sampled_ids,
                      item.sampled_logprobs, item.request_messages, item.request_tools,
                      item.n_tools, item.finish_reason, meta)
        turn_id, index, prompt, completion, logprobs, messages, tools, n_tools, finish, meta = fields
        completion = tuple(completion or ())
        return cls(
            turn_id=str(turn_id), session_id=session_id, seq=int(index if seq is None else seq),
            prompt_token_ids=tuple(prompt or ()) or None, completion_token_ids=completion,
            logprobs=tuple(logprobs or ()) if logprobs or not completion else None,
            messages=tuple(messages or ()), finish_reason=finish, metadata=meta,
            tools_offered=int(len(tools or ()) if n_tools is None else n_tools),
            tools=tuple(tools) if tools else None,
        )


def turns_from_openenv(source: Any, *, session_id: str = "") -> list[CapturedTurn]:
    """Every turn of an OpenEnv capture: a `RolloutGraph` (`server.registry.get(sid).graph`), a
    list of `TraceEntry` dicts, or the `{"entries": [...]}` body of `/trace_entries`."""
    if hasattr(source, "nodes"):
        return [CapturedTurn.from_openenv(n, session_id=session_id) for n in source.nodes()]
    if isinstance(source, dict):
        session_id = session_id or str(source.get("session_id") or "")
        source = source.get("entries") or []
    return [CapturedTurn.from_openenv(e, session_id=session_id, seq=i)
            for i, e in enumerate(source)]


@dataclass(frozen=True)
class Transition:
    """The link from `parent_id` to `turn_id`, measured as TRL measures it (module docstring)."""

    turn_id: str
    parent_id: str
    kind: str  # "clean" | "realign" | "fork"
    drift: int
    matched: int  # common prefix of the parent's prompt+completion and this turn's prompt


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
    """One training sequence: a FORK-free run of the agent chain, flattened."""

    turn_ids: tuple[str, ...]
    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    prompt_len: int  # tokens before the first completion token

    @property
    def n_trainable(self) -> int:
        return sum(self.loss_mask)


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


# --- token math -------------------------------------------------------------------------------
def _lcp(a: tuple, b: tuple, off: int = 0) -> int:
    """Common prefix length of `a` and `b[off:]`: C-level compares in galloping chunks."""
    n = min(len(a), len(b) - off)
    if n <= 0 or a[0] != b[off]:
        return 0
    head = min(n, 64)  # an early difference must not cost a full-length slice
    if a[n - 1] == b[off + n - 1] and a[:head] == b[off : off + head]:
        if n == head or (a if n == len(a) else a[:n]) == b[off : off + n]:
            return n
    i, step = 0, 256
    while i < n:
        j = min(n, i + step)
        if a[i:j] == b[off + i : off + j]:
            i, step = j, step * 2
            continue
        lo, hi = i, j  # a[:lo] matches; a mismatch lies in [lo, hi)
        while hi - lo > 16:
            mid = (lo + hi) >> 1
            if a[lo:mid] == b[off + lo : off + mid]:
                lo = mid
            else:
                hi = mid
        while a[lo] == b[off + lo]:
            lo += 1
        return lo
    return n


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    return _lcp(tuple(a), tuple(b))


def measure_drift(
    held_prompt: Sequence[int], held_completion: Sequence[int], prompt: Sequence[int],
    fork_threshold_tokens: int,
) -> tuple[str, int, int]:
    """`(kind, drift, matched)` of `prompt` against `held_prompt + held_completion` (TRL's rule)."""
    held_prompt, held_completion, prompt = tuple(held_prompt), tuple(held_completion), tuple(prompt)
    matched = _lcp(held_prompt, prompt)
    if matched == len(held_prompt):
        matched += _lcp(held_completion, prompt, matched)
    drift = len(held_prompt) + len(held_completion) - matched
    return _classify(matched, drift, len(held_prompt), fork_threshold_tokens), drift, matched


def _classify(matched: int, drift: int, parent_prompt_len: int, threshold: int) -> str:
    if drift == 0:
        return CLEAN
    if drift < threshold and matched >= parent_prompt_len:
        return REALIGN
    return FORK


def _logprobs_ok(turn: CapturedTurn) -> bool:
    lp = turn.logprobs
    return (
        lp is not None
        and len(lp) == len(turn.completion_token_ids)
        and all(map(math.isfinite, lp))
        and (not lp or max(lp) <= 0.0)
    )


def flatten(turns: list[CapturedTurn], transitions: Iterable[Transition]) -> tuple[Segment, ...]:
    """Flatten consecutive turns into segments, given the transitions between them (TRL's
    `_SampleBuilder`: FORK starts a segment, REALIGN overwrites the drifted tail as context)."""
    segments: list[Segment] = []
    tokens: list[int] = []
    mask: list[int] = []
    lps: list[float] = []
    ids: list[str] = []
    prompt_len = 0

    def close() -> None:
        if ids:
            segments.append(Segment(tuple(ids), tuple(tokens), tuple(mask), tuple(lps), prompt_len))

    kinds = [None, *transitions]
    for turn, link in zip(turns, kinds):
        prompt = turn.prompt_token_ids or ()
        if link is None or link.kind == FORK:
            close()
            tokens, mask, lps, ids, prompt_len = [], [], [], [], len(prompt)
            start = 0
        elif link.kind == REALIGN:  # drifted tail of the held completion -> engine tokens, context
            start = link.matched
            del tokens[start:], mask[start:], lps[start:]
        else:
            start = len(tokens)
        tail = prompt[start:]
        tokens.extend(tail)
        mask.extend(repeat(0, len(tail)))
        lps.extend(repeat(0.0, len(tail)))
        completion = turn.completion_token_ids
        ok = _logprobs_ok(turn)
        tokens.extend(completion)
        mask.extend(repeat(1 if ok else 0, len(completion)))
        lps.extend(turn.logprobs if ok else repeat(0.0, len(completion)))
        ids.append(turn.turn_id)
    close()
    return tuple(segments)


# --- linking ------------------------------------------------------------------------------------
def _link(turns: list[CapturedTurn], aux: list[bool], threshold: int):
    """Parent index (-1: root) and link per turn. See LINKING in the module docstring."""
    n = len(turns)
    parent, links = [-1] * n, [None] * n
    cpar, jump, depth, endlen = [-1] * n, list(range(n)), [0] * n, [0] * n
    tips: tuple[dict, dict] = ({}, {})  # per universe: head key -> OrderedDict of tip indices
    shorts: tuple[set, set] = (set(), set())  # prompt lengths < HEAD used as keys
    tipkey: dict[int, tuple] = {}
    for k, turn in enumerate(turns):
        prompt = turn.prompt_token_ids
        if prompt is None:
            continue
        u = int(aux[k])
        endlen[k] = len(prompt) + len(turn.completion_token_ids)
        keys = [prompt[:HEAD]] if len(prompt) >= HEAD else []
        keys += [prompt[:s] for s in shorts[u] if s <= len(prompt)]
        cands = [c for key in keys for c in tips[u].get(key, ())]
        evaluated = []  # (matched, drift, kind, index)
        for c in cands:
            held = turns[c]
            kind, drift, matched = measure_drift(
                held.prompt_token_ids, held.completion_token_ids, prompt, threshold
            )
            evaluated.append((matched, drift, kind, c))
        eligible = [e for e in evaluated if e[2] != FORK]
        top = max(evaluated, key=lambda e: (e[0], e[3]), default=None)
        best = max(eligible, key=lambda e: (e[0], -e[1], e[3]), default=None)
        if top is not None and top[1] > 0 and (best is None or best[0] < top[0]):
            m, v = top[0], top[3]  # walk the CLEAN ancestry of the best tip
            while cpar[v] != -1 and endlen[cpar[v]] > m:
                j = jump[v]
                v = j if endlen[j] > m else cpar[v]
            extra = [(m, endlen[v] - m, _classify(m, endlen[v] - m, len(turns[v].prompt_token_ids),
                                                  threshold), v)]
            if cpar[v] != -1:
                extra.append((endlen[cpar[v]], 0, CLEAN, cpar[v]))
            evaluated += extra
            eligible += [e for e in extra if e[2] != FORK]
            best = max(eligible, key=lambda e: (e[0], -e[1], e[3]), default=None)
        if best is not None:
            matched, drift, kind, p = best
            parent[k] = p
            links[k] = Transition(turn.turn_id, turns[p].turn_id, kind, drift, matched)
            if p in tipkey:
                tips[u][tipkey.pop(p)].pop(p, None)
            if kind == CLEAN:
                cpar[k], depth[k] = p, depth[p] + 1
                jp = jump[p]
                jump[k] = jump[jp] if depth[p] - depth[jp] == depth[jp] - depth[jump[jp]] else p
        elif evaluated:
            matched, drift, _, c = min(evaluated, key=lambda e: (e[1], -e[3]))
            links[k] = Transition(turn.turn_id, turns[c].turn_id, FORK, drift, matched)
        key = prompt[:HEAD] if len(prompt) >= HEAD else prompt
        if len(prompt) < HEAD:
            shorts[u].add(len(prompt))
        bucket = tips[u].setdefault(key, OrderedDict())
        bucket[k] = None
        tipkey[k] = key
        if len(bucket) > MAX_TIPS:
            tipkey.pop(bucket.popitem(last=False)[0], None)
    return parent, links


# --- analysis -----------------------------------------------------------------------------------
def _system_text(messages: tuple) -> str | None:
    """The leading system/developer messages' text: the identity of a conversation's role."""
    if not messages:
        return None
    parts = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
            break
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(str(content or ""))
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


def analyse(
    turns: Iterable[CapturedTurn], fork_threshold_tokens: int = DEFAULT_FORK_THRESHOLD
) -> Trajectory:
    """Link, classify, label and select the agent chain of one rollout's captured turns."""
    ordered = sorted(turns, key=lambda t: t.seq)
    n, thr = len(ordered), fork_threshold_tokens
    if not n:
        empty = Finding("fatal", "empty", "no model calls were captured: the agent never reached "
                        "the proxy (wrong base URL, unreachable engine, rejected key). UNGRADED, "
                        "never 0.0 (F07)")
        return Trajectory((), thr, (), (), (), (), (), (empty,),
                          TrajectoryStats(*([0] * 12), 0.0, 0.0, 0, 0), False)

    any_tools = any(t.tools_offered > 0 for t in ordered)
    aux = [_is_aux(t, any_tools) for t in ordered]
    parent, links = _link(ordered, aux, thr)

    # Trees under each root, depth, and the root's main path (root -> deepest leaf, latest on ties).
    root_of, depth, members = [0] * n, [0] * n, {}
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
            kind, drift, matched = measure_drift(
                a.prompt_token_ids, a.completion_token_ids, b.prompt_token_ids, thr)
            transitions.append(Transition(b.turn_id, a.turn_id, kind, drift, matched))

    root_recs = tuple(
        Root(ordered[r].turn_id, label[r], tuple(ordered[k].turn_id for k in members[r]),
             links[r].parent_id if links[r] else None, links[r].drift if links[r] else None)
        for r in roots
    )
    per_turn = n >= 2 and len(roots) == n and sum(not a for a in aux) >= 2
    chain_turns = [ordered[k] for k in chain]
    stats = _stats(n, roots, label, roles, transitions, _trained(chain_turns, transitions), len(chain))
    findings = _findings(ordered, roots, label, roles, chain, transitions, stats, per_turn, thr)
    return Trajectory(
        turns=tuple(ordered), fork_threshold_tokens=thr, links=tuple(links), roles=tuple(roles),
        roots=root_recs, agent_chain=tuple(t.turn_id for t in chain_turns),
        chain_transitions=tuple(transitions), findings=tuple(findings), stats=stats,
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
        per_segment[-1] += kept if _logprobs_ok(turn) else 0
    return per_segment


def _stats(n, roots, label, roles, transitions, segments, chain_len) -> TrajectoryStats:
    kinds, drifts, m = [t.kind for t in transitions], [t.drift for t in transitions], len(transitions)
    return TrajectoryStats(
        turns=n, agent_turns=chain_len, roots=len(roots),
        auxiliary_roots=sum(label[r] == AUXILIARY for r in roots),
        subagent_roots=sum(label[r] == SUBAGENT for r in roots),
        discarded_turns=roles.count(DISCARDED), transitions=m,
        clean=kinds.count(CLEAN), realign=kinds.count(REALIGN), fork=kinds.count(FORK),
        drift_mean=sum(drifts) / m if m else 0.0, drift_max=max(drifts, default=0),
        fork_frac=kinds.count(FORK) / m if m else 0.0,
        realign_frac=kinds.count(REALIGN) / m if m else 0.0,
        samples_per_rollout=sum(1 for trained in segments if trained),
        trainable_tokens=sum(segments),
    )


def _findings(turns, roots, label, roles, chain, transitions, stats, per_turn, thr) -> list[Finding]:
    """Per-call contract checks and structure, aggregated per code (a 1,000-call rollout stays
    readable). Each entry: level, code, the calls it concerns, and what to do about it."""
    enum = list(enumerate(turns))
    bad_len = [i for i, t in enum if t.logprobs is not None
               and len(t.logprobs) != len(t.completion_token_ids)]
    of = lambda lab: [r for r in roots if label[r] == lab]  # noqa: E731
    forks = [t for t in transitions if t.kind == FORK]
    realigns = [t for t in transitions if t.kind == REALIGN]
    small = sum(t.drift < thr for t in forks)
    rules = [
        ("fatal", "missing_prompt_ids", [i for i, t in enum if t.prompt_token_ids is None],
         "{n} call(s) carry no engine prompt_token_ids ({ids}): serve with "
         "--return-tokens-as-token-ids and request return_token_ids; never re-render (F01)"),
        ("fatal", "missing_logprobs",
         [i for i, t in enum if t.logprobs is None and t.completion_token_ids],
         "{n} call(s) sampled tokens without logprobs ({ids}): request logprobs=True; the "
         "importance ratio needs the behaviour policy's logprob of every trained token"),
        ("fatal", "logprob_length_mismatch", bad_len, "{n} call(s) carry a logprob count other "
         "than their completion length ({ids}): credit would shift onto the wrong tokens"),
        ("fatal", "invalid_logprob", [i for i, t in enum if t.logprobs is not None
                                      and i not in bad_len and not _logprobs_ok(t)],
         "{n} call(s) carry non-finite or positive logprobs ({ids})"),
        ("fatal", "duplicate_turn_id", [0] if len({t.turn_id for t in turns}) < len(turns) else [],
         "two calls share a turn_id; ids must be unique"),
        ("fatal", "no_agent_chain", [] if chain else [0], "no call belongs to an agent "
         "conversation (only auxiliary calls were captured): nothing to train"),
        ("warn", "per_turn_capture_only", roots if per_turn else [], "every call is its own root "
         "({n}): the harness re-renders its prompt instead of appending. Tokens and logprobs are "
         "exact; multi-turn credit assignment is lost (F04)"),
        ("warn", "multiple_roots", roots if len(roots) > 1 and not per_turn else [],
         f"{{n}} roots across {len(turns)} calls: {len(of(AGENT))} agent, "
         f"{len(of(AUXILIARY))} auxiliary, {len(of(SUBAGENT))} sub-agent. Only the agent chain "
         "is trained (F03)"),
        ("info", "auxiliary_root", of(AUXILIARY), "{n} auxiliary root(s) excluded from training "
         "(title/summary or tool-less calls: {ids})"),
        ("warn", "subagent_root", of(SUBAGENT), "{n} sub-agent root(s) excluded from training "
         "(tools, another system prompt: {ids})"),
        ("warn", "discarded_turns", [k for k, r in enumerate(roles) if r == DISCARDED],
         "{n} agent call(s) off the chain (retries or abandoned branches: {ids}); not trained"),
        ("warn", "fork", forks, f"{{n}} of {len(transitions)} agent-chain transition(s) fork "
         f"(max drift {max((t.drift for t in forks), default=0)}, threshold {thr})"
         + (f"; {small} drift less than the threshold but reach into the previous call's prompt "
            "(e.g. a re-rendered generation prompt), which TRL's reconciler cannot realign"
            if small else "")
         + f": one conversation becomes {stats.samples_per_rollout} training sequences (F02)"),
        ("info", "realign", realigns, "{n} transition(s) realign (drift max "
         f"{max((t.drift for t in realigns), default=0)} < {thr}): the drifted completion tail "
         "is replaced by the engine's re-rendered tokens, as context, as TRL does"),
        ("warn", "truncated_turn", [k for k in chain if turns[k].finish_reason == "length"],
         "{n} agent call(s) stopped on the output-token cap ({ids}): their endings are artefacts"),
    ]
    return [
        Finding(level, code, text.format(n=len(items), ids=_ids(turns, items)
                                         if items and isinstance(items[0], int) else ""))
        for level, code, items, text in rules if items
    ]
