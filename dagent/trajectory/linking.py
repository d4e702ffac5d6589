"""Linking captured calls by token prefix: drift, CLEAN / REALIGN / FORK, and each call's parent.
Pure: no network, no processes, no tokenizer.

DRIFT is TRL 1.16's (`_SampleBuilder.classify_token_drift`, trl/experimental/async_grpo/
async_rollout_worker.py). For a parent p and a later turn k:

    held    = p.prompt_token_ids + p.completion_token_ids
    matched = common_prefix_len(held, k.prompt_token_ids)
    drift   = len(held) - matched      # p's tokens that k's prompt does not reproduce at its start

    CLEAN    drift == 0
    REALIGN  0 < drift < fork_threshold_tokens and matched >= len(p.prompt_token_ids)
             (strict `<`, and the change must lie inside p's COMPLETION, exactly as TRL)
    FORK     otherwise: k starts a new root, i.e. a new training sequence

LINKING (`link_turns`). Auxiliary calls link only to auxiliary calls, the rest only to the rest. Of the
earlier turns whose link to k would be CLEAN or REALIGN, k's parent is the one sharing the longest
prefix with k's prompt (ties: smaller drift, then latest). An exact-prefix parent (drift 0) is
therefore the deepest one, and a REALIGN onto the call just before k beats an exact link to its
grandparent (a messages-reconstructing harness stays one chain). With no such turn, k is a root;
its link keeps the candidate with the smallest drift, for the report. Candidates are the open chain
tips whose prompt starts with k's first HEAD tokens (a CLEAN or REALIGN parent's prompt is always a
prefix of k's), at most MAX_TIPS per head (one, for an appending client), plus the best tip's
deepest exact-prefix ancestor and its child, found through skew-binary jump pointers in O(log
turns). Each candidate costs one prefix compare over `array('I')` machine words (C-level,
stopping at the first difference by galloping): one pass over each prompt in the common case,
O(MAX_TIPS x total tokens) at worst, never quadratic in turns (benchmarks/trajectory.py measures
it against OpenEnv's graph, which walks every earlier call for every call).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

from dagent.trajectory.turn import CapturedTurn, token_ids

CLEAN, REALIGN, FORK = "clean", "realign", "fork"
DEFAULT_FORK_THRESHOLD = 1024  # TRL's `fork_threshold_tokens` default
HEAD = 32  # prompt tokens that key the candidate index
MAX_TIPS = 16  # open chain tips kept per head


@dataclass(frozen=True)
class Transition:
    """The link from `parent_id` to `turn_id`, measured as TRL measures it (module docstring)."""

    turn_id: str
    parent_id: str
    kind: str  # "clean" | "realign" | "fork"
    drift: int
    matched: int  # common prefix of the parent's prompt+completion and this turn's prompt


def _lcp(a: array, b: array, off: int = 0) -> int:
    """Common prefix length of `a` and `b[off:]` (both `array('I')`): whole-range compare first,
    then galloping chunks and a bisection, so an early difference never costs a full slice."""
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
    return _lcp(token_ids(a), token_ids(b))


def _classify(matched: int, drift: int, parent_prompt_len: int, threshold: int) -> str:
    if drift == 0:
        return CLEAN
    if drift < threshold and matched >= parent_prompt_len:
        return REALIGN
    return FORK


def array_drift(held_prompt: array, held_completion: array, prompt: array, threshold: int):
    matched = _lcp(held_prompt, prompt)
    if matched == len(held_prompt):
        matched += _lcp(held_completion, prompt, matched)
    drift = len(held_prompt) + len(held_completion) - matched
    return _classify(matched, drift, len(held_prompt), threshold), drift, matched


def measure_drift(
    held_prompt: Sequence[int],
    held_completion: Sequence[int],
    prompt: Sequence[int],
    fork_threshold_tokens: int,
) -> tuple[str, int, int]:
    """`(kind, drift, matched)` of `prompt` against `held_prompt + held_completion` (TRL's rule)."""
    return array_drift(token_ids(held_prompt), token_ids(held_completion), token_ids(prompt), fork_threshold_tokens)


def link_turns(turns: list[CapturedTurn], aux: list[bool], threshold: int) -> tuple[list[int], list[Any]]:
    """Parent index (-1: root) and `Transition` (None: no candidate) per turn, turns in arrival
    order. See LINKING in the module docstring."""
    n = len(turns)
    parent: list[int] = [-1] * n
    links: list[Transition | None] = [None] * n
    cpar, jump, depth, endlen = [-1] * n, list(range(n)), [0] * n, [0] * n
    tips: tuple[dict, dict] = ({}, {})  # per universe: head key (bytes) -> OrderedDict of tips
    shorts: tuple[set, set] = (set(), set())  # prompt lengths < HEAD used as keys
    tipkey: dict[int, bytes] = {}
    for k, turn in enumerate(turns):
        prompt = turn.prompt_token_ids
        if prompt is None:
            continue
        u = int(aux[k])
        endlen[k] = len(prompt) + len(turn.completion_token_ids)
        keys = [prompt[:HEAD].tobytes()] if len(prompt) >= HEAD else []
        keys += [prompt[:s].tobytes() for s in shorts[u] if s <= len(prompt)]
        cands = [c for key in keys for c in tips[u].get(key, ())]
        evaluated = []  # (matched, drift, kind, index)
        for c in cands:
            held = turns[c]
            kind, drift, matched = array_drift(held.prompt_token_ids, held.completion_token_ids, prompt, threshold)
            evaluated.append((matched, drift, kind, c))
        eligible = [e for e in evaluated if e[2] != FORK]
        top = max(evaluated, key=lambda e: (e[0], e[3]), default=None)
        best = max(eligible, key=lambda e: (e[0], -e[1], e[3]), default=None)
        if top is not None and top[1] > 0 and (best is None or best[0] < top[0]):
            m, v = top[0], top[3]  # walk the CLEAN ancestry of the best tip
            while cpar[v] != -1 and endlen[cpar[v]] > m:
                j = jump[v]
                v = j if endlen[j] > m else cpar[v]
            extra = [(m, endlen[v] - m, _classify(m, endlen[v] - m, len(turns[v].prompt_token_ids), threshold), v)]
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
        key = (prompt[:HEAD] if len(prompt) >= HEAD else prompt).tobytes()
        if len(prompt) < HEAD:
            shorts[u].add(len(prompt))
        bucket = tips[u].setdefault(key, OrderedDict())
        bucket[k] = None
        tipkey[k] = key
        if len(bucket) > MAX_TIPS:
            tipkey.pop(bucket.popitem(last=False)[0], None)
    return parent, links
