"""The white-box tool loop as an `Agent`: the loop TRL's `environment_factory` runs in training,
driven against an OpenAI-compatible engine (vLLM, or the local engine) for evaluation.

A number measured under other conditions than the policy trained under is comparable to nothing,
so every condition comes from the same source as training (tests/harness/test_toolloop.py):

- the conversation TRL builds: one user message whose content is the instruction as `reset()`
  returns it (reworded for `submit_solution`, F28), no system message of ours;
- the tool schemas TRL derives (`transformers.utils.get_json_schema` of the generated tool
  functions of `dagent.tools`, the one registry, F25); tool results as TRL appends them,
  `{"role": "tool", "name": ..., "content": ToolResult.render()}`;
- every non-terminator call goes through `dagent.tools.episode.Episode.call`: the same step
  budget (terminator exempt, F26), validation, clipping to `output_chars` and implementations;
- the loop ends where TRL's does: a reply without tool calls, `max_tool_calling_iterations`, or
  the completion budget (`max_completion_length`, which counts tool-result tokens) exceeded;
  and, to save compute, at the first accepted `submit_solution` (its grade is fixed there in
  training too: later calls are refused as "the episode is over").
- sampling is `dagent.core.sampling.RECIPE_SAMPLING` (what the trainer samples with, F05), one seed
  per sample from the episode skeleton.

The submitted answer (coerced once, F27) is written to /workdir/answer.txt, which the skeleton
grades like every agent's. Engine failures are data: no answer at all -> `zero_model_calls`, a loop
ended by an unreachable or failing engine -> `engine_unreachable` (both void the answer, F07).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import httpx

from dagent.core.sampling import RECIPE_SAMPLING, Sampling, call_seed
from dagent.core.task import ANSWER_PATH, Task
from dagent.errors import DagentError, EngineError
from dagent.harness.base import AgentRun
from dagent.sandbox.base import Sandbox
from dagent.tools import TERMINATOR, ToolResult, tool_function, validate
from dagent.tools.episode import SUBMITTED, Episode, EpisodeConfig, reword_submission


@dataclass(frozen=True)
class LoopLimits:
    """Where a white-box episode's generation stops; training reads the same values."""

    max_completion_length: int = 3072  # generated + tool-result tokens after the prompt (TRL's meaning)
    max_tool_calling_iterations: int | None = None  # None: unbounded, as TRL's default
    max_tokens_per_turn: int = 512  # one generation's max_tokens


@lru_cache(maxsize=16)
def _schemas(tools: tuple[str, ...]) -> tuple[str, ...]:
    from transformers.utils import get_json_schema

    return tuple(json.dumps(get_json_schema(tool_function(name, lambda *a, **k: None))) for name in tools)


def tool_schemas(tools: tuple[str, ...]) -> list[dict[str, Any]]:
    """The schemas TRL hands the chat template for an environment class serving `tools`."""
    return [json.loads(s) for s in _schemas(tuple(tools))]


def parse_arguments(raw: Any) -> dict[str, Any] | ToolResult:
    """A tool call's arguments as a dict, or the error result the model gets for malformed ones."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError) as e:
        return ToolResult(
            False, f"the tool call's arguments are not valid JSON ({e}); send a JSON object of the tool's parameters"
        )
    if not isinstance(value, dict):
        return ToolResult(False, "the tool call's arguments must be a JSON object of the tool's parameters")
    return value


class LoopAborted(DagentError):
    """Raised by a tool executor whose episode is lost (its server went away): the loop stops."""


@dataclass
class Transcript:
    messages: list[dict[str, Any]]
    model_calls: int = 0
    prompt0: int | None = None  # the first prompt's token count
    completion_tokens_used: int = 0
    malformed_calls: int = 0
    stop: str = "no_tool_calls"
    finish_reasons: list[str] = field(default_factory=list)
    answer: str | None = None  # the accepted submission
    iterations: int = 0  # turns whose tool calls were executed


class ToolLoopAgent:
    """The tool loop against an engine by URL (module docstring)."""

    name = "tools"

    def __init__(
        self,
        engine_url: str,
        model: str,
        *,
        config: EpisodeConfig | None = None,
        limits: LoopLimits = LoopLimits(),
        sampling: Sampling = RECIPE_SAMPLING,
        request_timeout_s: float = 600.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.engine_url, self.model = engine_url.rstrip("/"), model
        self.config, self.limits, self.sampling = config or EpisodeConfig(), limits, sampling
        self.tools = self.config.tools
        self._client = client or httpx.Client(timeout=request_timeout_s)

    def conversation(self, task: Task) -> list[dict[str, Any]]:
        """The messages TRL starts from: the row's empty user message + what `reset()` returns."""
        return [{"role": "user", "content": "" + reword_submission(task.instruction)}]

    def _generate(self, messages: list[dict[str, Any]], seed: int | None, turn: int) -> dict[str, Any]:
        body = {
            "model": self.model,
            "messages": messages,
            "tools": tool_schemas(self.tools),
            "max_tokens": self.limits.max_tokens_per_turn,
            **self.sampling.as_request(),
        }
        if seed is not None:
            body["seed"] = call_seed(seed, turn)  # one stream per turn, fixed by the sample's seed
        try:
            r = self._client.post(f"{self.engine_url}/v1/chat/completions", json=body)
        except httpx.HTTPError as e:
            raise EngineError(f"engine_unreachable: {self.engine_url}: {e}") from e
        if r.status_code == 400:  # vLLM's answer to a prompt past the context: the loop ends there
            return {"overflow": r.text[:300]}
        if r.status_code != 200:
            raise EngineError(f"engine_error: HTTP {r.status_code}: {r.text[:300]}")
        return r.json()

    def loop(
        self, messages: list[dict[str, Any]], seed: int | None, call: Callable[[str, dict[str, Any]], ToolResult]
    ) -> tuple[Transcript, str | None, str]:
        """Generate, execute each tool call through `call` (the terminator too), append, repeat:
        (transcript, the accepted answer or None, the engine failure or ""). `call` raising
        `LoopAborted` ends the loop there (the episode is lost; nothing more is worth generating)."""
        t = Transcript(messages)
        try:
            while (stop := self.step(t, seed, call)) is None:
                pass
            t.stop = stop
        except EngineError as e:
            t.stop = "engine_error"
            return t, t.answer, str(e)
        except LoopAborted:
            t.stop = "aborted"
        return t, t.answer, ""

    def step(self, t: Transcript, seed: int | None, call: Callable[[str, dict[str, Any]], ToolResult]) -> str | None:
        """ONE turn of the loop: a generation, then each of its tool calls through `call`, appended
        to `t.messages` (an accepted answer lands in `t.answer`). Returns why the loop ends here, or
        None to go on. Raises `EngineError` / `LoopAborted` (the demo steps with it turn by turn)."""
        reply = self._generate(t.messages, seed, t.model_calls)
        if "overflow" in reply:
            return "context_overflow"
        t.model_calls += 1
        usage = reply.get("usage") or {}
        choice = (reply.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        t.finish_reasons.append(str(choice.get("finish_reason")))
        if t.prompt0 is None:
            t.prompt0 = int(usage.get("prompt_tokens") or 0)
        t.completion_tokens_used = (
            int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0) - t.prompt0
        )
        calls = message.get("tool_calls") or []
        t.messages.append(
            {"role": "assistant", "content": message.get("content") or "", **({"tool_calls": calls} if calls else {})}
        )
        if not calls:
            return "no_tool_calls"
        if t.completion_tokens_used > self.limits.max_completion_length:
            return "completion_budget"
        for tool_call in calls:
            function = tool_call.get("function") or {}
            name = str(function.get("name") or "")
            args = parse_arguments(function.get("arguments"))
            if isinstance(args, ToolResult):
                t.malformed_calls += 1
                result = args
            else:
                result = call(name, args)
                if name == TERMINATOR and result.ok:
                    t.answer = str(args.get("answer"))
            t.messages.append({"role": "tool", "name": name, "content": result.render()})
            if t.answer is not None:
                break
        t.iterations += 1
        if t.answer is not None:
            return "submitted"
        limit = self.limits.max_tool_calling_iterations
        if limit is not None and t.iterations >= limit:
            return "tool_iterations"
        return None

    def run(self, task: Task, sandbox: Sandbox, *, timeout_s: float | None = None, seed: int | None = None) -> AgentRun:
        episode = Episode(uuid.uuid4().hex, task, split="", index=-1, config=self.config, sandbox=sandbox)

        def call(name: str, args: dict[str, Any]) -> ToolResult:
            if name != TERMINATOR:
                return episode.call(name, args)
            checked = validate(TERMINATOR, args, self.tools)
            if isinstance(checked, ToolResult):
                return checked
            args["answer"] = checked["answer"]  # coerced once (F27)
            return ToolResult(True, SUBMITTED)

        t, answer, engine_note = self.loop(self.conversation(task), seed, call)
        if answer is not None:
            sandbox.write_file(ANSWER_PATH, answer)
        if t.model_calls == 0:
            cause = "zero_model_calls"
        elif engine_note:
            cause = "engine_unreachable"
        else:  # as Episode.finish: the last call's infrastructure cause counts only without an answer
            cause = episode.last_cause if answer is None else None
        return AgentRun(
            model_calls=t.model_calls,
            tool_calls=episode.tool_calls,
            cause=cause,
            metadata={
                "stop": t.stop,
                "completion_tokens": t.completion_tokens_used,
                "refused_calls": episode.refused_calls,
                "malformed_calls": t.malformed_calls,
                "step_capped": episode.refused_calls > 0,
                "finish_reasons": t.finish_reasons,
                "engine_error": engine_note,
                "messages": t.messages,
            },
        )
