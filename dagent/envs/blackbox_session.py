"""TRL's loop-owning path: the session factory `HarnessRolloutWorker` drives.

TRL 1.16 (`trl/experimental/async_grpo/openenv_harness.py`) calls
`harness_session_factory(sampling=dict)` ONCE, in a spawned child, so the factory must pickle:
pass `functools.partial(BlackBoxSessionFactory, server_url, split="train")`. Per rollout it calls
`create(prompt, seed=group_id, episode_id=...)`, then `wait_for_completion()`,
`fetch_training_trace()` (converted by its `_turns_from_training_trace` + `_chain_to_sequences`),
`verify(transcript)` (its `env_reward`: `None` leaves the group baseline) and always `close()`.

Here a session is one HTTP call to a running black-box server (`POST /data_agent_blackbox/rollout`
with `include_trace`), made in a thread at `create` so creation is instant. The prompt is resolved
back to ONE task on the server, by exact instruction text within the factory's split, exactly as
the suite resolves prompts (F11, F12); a row dict with `split`/`index` is used as it is.

The trainer's sampling reaches the factory; it must equal the sampling the capture proxy pins on
every engine call (dagent.core.sampling), or the importance ratio is computed against a distribution
that never produced the samples (F05): a mismatch is refused at construction, naming both.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
from openenv.core.harness import ResourceSession, ResourceSessionFactory, ToolResult, TrainingTrace, VerifyResult

from dagent.errors import ConfigError, DagentError
from dagent.runtime.blackbox import ENV_NAME
from dagent.trajectory.messages import content_text


class RolloutRequestError(DagentError):
    """The black-box server refused or failed a rollout request."""


def instruction_of(task: Any) -> str | None:
    if isinstance(task, str):
        return task
    if isinstance(task, list):  # chat messages: the last user message is the instruction
        users = [m for m in task if isinstance(m, dict) and m.get("role") == "user"]
        content = users[-1].get("content") if users else None
        return content_text(content) if isinstance(content, str | list) else None
    return None


def check_sampling(trainer: dict[str, Any], server: dict[str, Any]) -> None:
    """The trainer's sampling must be the one the proxy pins (F05). top_k 0 and -1 both mean off."""

    def norm(s: dict[str, Any]) -> tuple[float, float, int]:
        top_k = int(s.get("top_k", 0) or 0)
        return float(s.get("temperature", 1.0)), float(s.get("top_p", 1.0)), 0 if top_k < 0 else top_k

    if norm(trainer) != norm(server):
        raise ConfigError(
            f"the trainer samples with {dict(zip(('temperature', 'top_p', 'top_k'), norm(trainer)))} but the "
            f"capture proxy pins {dict(zip(('temperature', 'top_p', 'top_k'), norm(server)))} on every engine "
            "call: set both from dagent.core.sampling (one source of truth, F05)"
        )


class BlackBoxSession(ResourceSession):
    """One rollout on the black-box server; the agent (the server's harness: opencode or pi) owns the loop."""

    def __init__(self, client: httpx.Client, body: dict[str, Any], instruction: str | None) -> None:
        self._client, self._body, self._instruction = client, body, instruction
        self._payload: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="blackbox-rollout", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            response = self._client.post(f"/{ENV_NAME}/rollout", json=self._body)
            if response.status_code != 200:
                raise RolloutRequestError(
                    f"the black-box server answered {response.status_code}: {response.text[:500]}"
                )
            self._payload = response.json()
        except BaseException as e:  # noqa: BLE001 - handed to wait_for_completion
            self._error = e

    # -- the loop-owning contract (openenv TrainableSession) ----------------------------------
    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """Wait for the rollout; the agent process's exit code (-1 when it never ran). TimeoutError if not done."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"the rollout did not finish within {timeout_s}s")
        if self._error is not None:
            raise self._error
        code = self.payload["exit_code"]
        return -1 if code is None else int(code)

    @property
    def payload(self) -> dict[str, Any]:
        if self._payload is None:
            raise RolloutRequestError("the rollout has not completed: call wait_for_completion() first")
        return self._payload

    def fetch_training_trace(self) -> TrainingTrace:
        """The agent chain's calls with engine ids, logprobs and masks; empty when ungraded."""
        return TrainingTrace.from_entries(self.payload.get("trace_entries") or [])

    def verify(self, transcript: list[dict[str, Any]], final_state: Any | None = None) -> VerifyResult:
        """Forward the server's reward: None (ungraded) stays None and leaves the baseline (F32)."""
        p = self.payload
        metrics = {
            k: p.get(k)
            for k in ("outcome", "cause", "tool_calls", "turns", "agent_turns", "model_calls", "budget_stops", "wall_s")
        }
        metrics["gate"] = (p.get("gate") or {}).get("tier")
        return VerifyResult(
            env_reward=p.get("reward"),
            done=True,
            metrics=metrics,
            artifacts={"task_id": p.get("task_id"), "answer": p.get("answer"), "findings": p.get("findings")},
        )

    # -- the step-per-turn contract does not apply: the agent owns the loop --------------------
    def initial_messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self._instruction}] if self._instruction else []

    def list_tools(self) -> list:
        return []

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        raise RolloutRequestError("a black-box session has no tools to call: the agent runs its own")

    def close(self) -> None:
        """Nothing to release here: the server closed the sandbox and the capture session."""
        self._thread.join(0)


class BlackBoxSessionFactory(ResourceSessionFactory):
    """Picklable factory (plain fields) for TRL's `HarnessRolloutWorker` (module docstring)."""

    def __init__(
        self, server_url: str, *, split: str = "train", sampling: dict[str, Any] | None = None, timeout_s: float = 900.0
    ) -> None:
        self.server_url, self.split, self.timeout_s = server_url.rstrip("/"), split, timeout_s
        self.sampling = sampling
        self._client: httpx.Client | None = None
        if sampling is not None:
            info = self.client().get(f"/{ENV_NAME}/info")
            if info.status_code != 200:
                raise RolloutRequestError(
                    f"{self.server_url}/{ENV_NAME}/info answered {info.status_code}: is this a black-box server?"
                )
            check_sampling(sampling, info.json()["sampling"])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(base_url=self.server_url, timeout=httpx.Timeout(self.timeout_s, connect=10.0))
        return self._client

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> BlackBoxSession:
        """Start the rollout `task` names: a row with `split`/`index`, or a prompt (its instruction)."""
        instruction = None
        if isinstance(task, dict) and "index" in task:
            body = {"split": task.get("split", self.split), "index": task["index"], "task_id": task.get("task_id")}
        else:
            instruction = instruction_of(task)
            if instruction is None:
                raise ConfigError(
                    f"cannot tell which task {type(task).__name__} {str(task)[:80]!r} names: pass a row "
                    "with split/index or the prompt messages from TaskSuite.prompt_rows"
                )
            body = {"split": self.split, "instruction": instruction}
        body.update(include_trace=True, timeout_s=None, episode_id=episode_id)
        return BlackBoxSession(self.client(), body, instruction)
