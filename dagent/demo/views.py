"""What the demo shows, as markdown and HTML, from the records the rest of dagent already keeps.
Pure: no gradio, no processes, no network (tests/demo/test_views.py).

Every view shows what the MODEL or the TRAINER gets, not a prettier version of it: a tool's
output is `ToolResult.render()` after the episode's clipping, the instruction is the one each loop
hands the agent, a grade names the rule that decided and the reward is `dagent.core.reward` of it, the
token chain is `Trajectory.sequences()` (the engine's ids, the loss mask, the engine's logprobs).
"""

from __future__ import annotations

import html
import inspect
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from dagent.core.reward import RewardConfig, reward
from dagent.core.task import INPUT_DIR, PublicTask
from dagent.grading.value import Grade
from dagent.tools import TERMINATOR, Signatures, ToolResult, signature, usage
from dagent.trajectory.analysis import Trajectory

PREVIEW_ROWS = 5
MAX_CHAIN_TOKENS = 4000  # per sequence; the middle of a longer one is elided with a marker
TRAINED = "background:#b7ebc6;border-bottom:2px solid #2f855a"
CONTEXT = "background:#edf2f7;color:#4a5568"
ROLE_COLOURS = {"user": "#ebf8ff", "assistant": "#f0fff4", "tool": "#fffaf0", "system": "#faf5ff"}


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _code(text: str, lang: str = "text") -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{lang}\n{text}\n{fence}"


# ------------------------------------------------------------------ the task


def format_task(task: PublicTask, split: str, index: int) -> str:
    files = "\n".join(f"- `{INPUT_DIR}/{Path(f).name}`" for f in task.data_files)
    sources = "; ".join(f"{s.table_id} ({s.package}, {s.licence})" for s in task.sources)
    return (
        f"### {task.task_id}\n"
        f"**split** `{split}` #{index} · **tier** {task.difficulty_tier} (level {task.difficulty_level})"
        f" · **answer** {task.answer_type}\n\n{task.instruction}\n\n**files**\n{files}\n\n"
        f"<sub>sources: {sources}</sub>"
    )


def format_instructions(instruction: str, reworded: str) -> str:
    """The instruction as each loop hands it to the agent (white-box: reworded for
    `submit_solution`, F28; black-box: as written, it files /workdir/answer.txt), as HTML: the
    text verbatim, wrapped, nothing rendered."""
    same = " (unchanged: it names no answer file)" if reworded == instruction else ""

    def block(title: str, text: str) -> str:
        return (
            f"<div style='margin:4px 0'><b>{title}</b></div><pre style='white-space:pre-wrap;"
            f"background:#f7fafc;padding:8px;border-radius:4px;margin:0 0 8px'>{_esc(text)}</pre>"
        )

    return block(f"White-box (the TRL environment, --agent tools): submit with {TERMINATOR}{same}", reworded) + block(
        "Black-box (opencode, Harbor): write /workdir/answer.txt", instruction
    )


def format_matches(matches: Sequence[tuple[str, int, str, str, str]]) -> list[tuple[str, str]]:
    """Dropdown choices for search hits (split, index, task id, tier, instruction): (label, value)."""
    out = []
    for split, index, task_id, tier, instruction in matches:
        words = " ".join(instruction.split())
        out.append(
            (
                f"{split} #{index} · {tier} · {task_id} · {words[:70]}{'…' if len(words) > 70 else ''}",
                f"{split}#{index}",
            )
        )
    return out


@lru_cache(maxsize=64)
def _frame(path: str, mtime: float):
    import pandas as pd

    if path.endswith(".parquet"):
        return pd.read_parquet(path)
    if path.endswith((".tsv", ".tab")):
        return pd.read_csv(path, sep="\t", low_memory=False)
    if path.endswith(".json"):
        return pd.read_json(path)
    return pd.read_csv(path, low_memory=False)


def _cell(value: Any) -> str:
    text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 40 else text[:39] + "…"


def format_table_preview(name: str, path: Path, rows: int = PREVIEW_ROWS) -> str:
    """One staged file: its shape, dtypes and first rows (what `pd.read_*` of it gives)."""
    size = path.stat().st_size
    head = f"#### `{INPUT_DIR}/{name}` · {size / 1e6:.2f} MB"
    try:
        df = _frame(str(path), path.stat().st_mtime)
    except Exception as e:  # noqa: BLE001 - a file pandas cannot read is shown as bytes
        raw = path.read_bytes()[:400].decode("utf-8", "replace")
        return f"{head}\n\nnot a table pandas reads ({type(e).__name__}: {e}); its first bytes:\n\n{_code(raw)}"
    dtypes = ", ".join(f"`{c}` {t}" for c, t in df.dtypes.astype(str).items())
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(_cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += [
        "| " + " | ".join(_cell(v) for v in row) + " |" for row in df.head(rows).itertuples(index=False, name=None)
    ]
    return f"{head} · **{len(df):,} rows × {len(cols)} columns**\n\n<sub>dtypes: {dtypes}</sub>\n\n" + "\n".join(lines)


# ------------------------------------------------------------------ tools by hand


def format_tool_doc(name: str) -> str:
    """How a tool is called and what the model is told it does (the registry's docstring)."""
    doc = inspect.cleandoc(getattr(Signatures, name).__doc__ or "")
    return f"`{usage(name)}`\n\n{doc}"


def tool_template(name: str) -> str:
    """A JSON arguments object for `name` with every parameter: defaults as declared, required
    ones blank for their type."""
    args: dict[str, Any] = {}
    for p in signature(name).parameters.values():
        if p.default is not inspect.Parameter.empty:
            args[p.name] = p.default
        else:
            args[p.name] = 0 if p.annotation is int else ""
    if name == "bash":
        args["command"] = f"ls -la {INPUT_DIR} && head -3 {INPUT_DIR}/*"
    return json.dumps(args)


def parse_tool_arguments(text: str) -> dict[str, Any] | str:
    """The arguments box as a JSON object, or the message saying why it is not one."""
    try:
        value = json.loads(text or "{}")
    except ValueError as e:
        return f'the arguments are not valid JSON ({e}); write a JSON object such as {{"command": "ls"}}'
    if not isinstance(value, dict):
        return "the arguments must be a JSON object of the tool's parameters"
    return value


def format_call(name: str, arguments: Mapping[str, Any], result: ToolResult, *, step: int, budget: int) -> str:
    """One tool call as the terminal shows it: the call, then exactly the text the model gets."""
    cause = f"   [infrastructure: {result.cause}]" if result.cause else ""
    head = f"[{step}/{budget}] {name} {json.dumps(dict(arguments), ensure_ascii=False)}{cause}"
    return f"{head}\n{result.render()}"


def format_steps(tool_calls: int, budget: int, refused: int = 0, done: bool = False) -> str:
    state = " · **episode over**" if done else ""
    return (
        f"steps used **{tool_calls}** of {budget} · refused {refused} · `{TERMINATOR}` is exempt from the budget{state}"
    )


# ------------------------------------------------------------------ grades


def format_grade(
    grade: Grade,
    gold: str | None = None,
    *,
    tool_calls: int | None = None,
    reward_config: RewardConfig = RewardConfig(),
) -> str:
    """Correct / wrong / ungraded with its cause, the rule that decided, and (given the tool-call
    count) the reward broken into correctness and the efficiency term."""
    if grade.correct is None:
        head = f"**Ungraded** · cause `{grade.note}`"
    else:
        head = ("**Correct**" if grade.correct else "**Wrong**") + f" · rule `{grade.method}`"
        if grade.note:
            head += f" · {grade.note}"
    lines = [head]
    if tool_calls is not None:
        value = reward(grade.correct, tool_calls, reward_config)
        if value is None:
            lines.append("reward **None**: an ungraded episode drops out of the group baseline, never 0.0")
        elif reward_config.mode == "correctness":
            lines.append(f"reward **{value:g}** = correctness {float(grade.correct):g} (no efficiency term)")
        else:
            w, b = reward_config.weight, reward_config.budget
            bonus = w * b / (b + tool_calls)
            lines.append(
                f"reward **{value:.4g}** = correctness {float(grade.correct):g} × (1 + efficiency "
                f"{bonus:.4g}); efficiency = {w:g}·{b:g}/({b:g} + {tool_calls} tool calls)"
            )
    if gold is not None:
        lines.append(f"gold: `{gold}`")
    return "\n\n".join(lines)


# ------------------------------------------------------------------ a model's episode


def format_conversation(messages: Iterable[Mapping[str, Any]]) -> str:
    """The conversation as the chat template renders it, one block per message (HTML)."""
    blocks = []
    for m in messages:
        role = str(m.get("role", "?"))
        label = role + (f" · {m['name']}" if m.get("name") else "")
        body = _esc(m.get("content") or "")
        calls = "".join(
            f"<div class='dg-call'>→ <b>{_esc((c.get('function') or {}).get('name'))}</b>"
            f"(<code>{_esc((c.get('function') or {}).get('arguments'))}</code>)</div>"
            for c in m.get("tool_calls") or ()
        )
        blocks.append(
            f"<div class='dg-msg dg-{_esc(role)}' style='background:{ROLE_COLOURS.get(role, '#fff')};"
            "padding:6px 8px;margin:4px 0;border-radius:6px'>"
            f"<div style='font-size:0.8em;color:#555'>{_esc(label)}</div>"
            f"<pre style='white-space:pre-wrap;margin:2px 0'>{body}</pre>{calls}</div>"
        )
    return "<div class='dg-conversation'>" + "".join(blocks) + "</div>" if blocks else "<i>no messages yet</i>"


def _token_text(decode: Callable[[int], str] | None, tid: int) -> str:
    if decode is None:
        return f"[{tid}]"
    text = decode(tid)
    return text.replace("\n", "↵\n") if text else "∅"


def format_token_chain(
    trajectory: Trajectory, decode: Callable[[int], str] | None = None, max_tokens: int = MAX_CHAIN_TOKENS
) -> str:
    """The agent chain as the trainer receives it (`Trajectory.sequences()`): every token of each
    sequence, trained ones (loss mask 1) highlighted with the engine's logprob on hover, prompts and
    tool results as context; a marker where each turn's completion starts, with its link's kind
    and drift. `decode` maps one id to its text (None: ids are shown)."""
    sequences = trajectory.sequences()
    if not sequences:
        return "<i>no agent chain: nothing here is trained</i>"
    links = {t.turn_id: t for t in trajectory.chain_transitions}
    seq_of = {t.turn_id: t.seq for t in trajectory.turns}
    out = [
        f"<div class='dg-legend'><span style='{TRAINED}'>trained (loss mask 1)</span> "
        f"<span style='{CONTEXT}'>context (prompt, tool results: mask 0)</span> · hover a token for "
        "its id and logprob</div>"
    ]
    for k, seg in enumerate(sequences):
        starts: dict[int, str] = {}
        for tid in seg.turn_ids:
            turn = trajectory.turn(tid)
            link = links.get(tid)
            how = "first call" if link is None else f"{link.kind.upper()} drift {link.drift}"
            starts[len(turn.prompt_token_ids or ())] = f"▶ turn {seq_of[tid]} ({tid}) · {how}"
        n = len(seg.input_ids)
        shown = range(n) if n <= max_tokens else [*range(max_tokens // 2), -1, *range(n - max_tokens // 2, n)]
        spans = []
        for i in shown:
            if i < 0:
                spans.append(f"<div class='dg-elided'>… {n - max_tokens:,} tokens not shown …</div>")
                continue
            if i in starts:
                spans.append(
                    f"<span class='dg-turn' style='display:inline-block;margin:2px;padding:0 4px;"
                    f"background:#2b6cb0;color:#fff;font-size:0.75em'>{_esc(starts[i])}</span>"
                )
            tid, mask = seg.input_ids[i], seg.loss_mask[i]
            title = (
                f"#{i} id {tid} · logprob {seg.logprobs[i]:.4f}" if mask else f"#{i} id {tid} · context, not trained"
            )
            spans.append(
                f"<span class='dg-tok' data-mask='{mask}' title='{_esc(title)}' "
                f"style='{TRAINED if mask else CONTEXT}'>{_esc(_token_text(decode, tid))}</span>"
            )
        out.append(
            f"<div class='dg-seq'><div><b>sequence {k + 1} of {len(sequences)}</b>: {n:,} tokens, "
            f"{seg.n_trainable:,} trained, prompt {seg.prompt_len:,}, turns "
            f"{', '.join(seg.turn_ids)}</div><div style='white-space:pre-wrap;font-family:monospace;"
            f"font-size:0.85em;line-height:1.6'>{''.join(spans)}</div></div>"
        )
    return "".join(out)


def format_turns(trajectory: Trajectory) -> str:
    """Every captured call with the role it was given (agent chain, auxiliary, sub-agent,
    discarded), its sizes and its link: a markdown table."""
    if not trajectory.turns:
        return "no model call was captured"
    lines = [
        "| # | turn | role | hint | prompt | completion | finish | tools | link |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for turn, role, link in zip(trajectory.turns, trajectory.roles, trajectory.links):
        how = "root" if link is None else f"{link.kind} (drift {link.drift}) from {link.parent_id}"
        lines.append(
            f"| {turn.seq} | {turn.turn_id} | **{role}** | {turn.role_hint or ''} | "
            f"{len(turn.prompt_token_ids or ()):,} | {len(turn.completion_token_ids):,} | "
            f"{turn.finish_reason or ''} | {turn.tools_offered} | {how} |"
        )
    roots = "; ".join(f"`{r.turn_id}` {r.label} ({len(r.turn_ids)} call(s))" for r in trajectory.roots)
    return "\n".join(lines) + f"\n\n**roots**: {roots}"


def format_verdict(verdict: Any, findings: Iterable[Any] = ()) -> str:
    """The trainability gate's tier and figures, then every finding (proxy's and analysis')."""
    tier = {"train": "train", "eval_only": "eval only", "reject": "REJECT"}.get(verdict.tier, verdict.tier)
    found = [f"- `{f}`" for f in findings]
    return f"**trainability: {tier}**\n\n{_code(verdict.report())}\n\n**findings**\n\n" + (
        "\n".join(found) if found else "none"
    )


def format_record(record: Mapping[str, Any]) -> str:
    """One evaluation record: outcome, cause, the rule and note, the answer, the counts."""
    outcome = str(record.get("outcome", "?")).upper()
    cause = f" · cause `{record['cause']}`" if record.get("cause") else ""
    return (
        f"### {record.get('task_id')} · {record.get('split')} #{record.get('index')} · sample "
        f"{record.get('sample', 0)}\n**{outcome}**{cause} · reward {record.get('reward')} · rule "
        f"`{record.get('method')}`"
        + (f" · {record['note']}" if record.get("note") else "")
        + f"\n\nagent `{record.get('agent')}` · model `{record.get('model')}` · model calls "
        f"{record.get('model_calls')} · tool calls {record.get('tool_calls')} · "
        f"{record.get('duration_s', 0):.1f}s\n\nanswer: `{record.get('answer')}`"
    )
