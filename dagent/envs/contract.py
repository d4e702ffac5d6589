"""What the white-box client and server share: names, routes and the trainer's dataset rows.

Nothing here imports a server (or openenv): the client depends on this module and on
`dagent.tools` (the one tool registry) only.

Routes (all relative to the server's base URL):
- `GET /health`, `POST /reset` (body: the dataset row, at least `split` and `index`), `POST /mcp`
  (JSON-RPC 2.0: `tools/list`, `tools/call`) -- openenv's own;
- the Task API under the environment's name: `GET /data_agent/splits`, `POST /data_agent/num_tasks`,
  `/data_agent/task`, `/data_agent/tasks`, `/data_agent/task_range` (F30: never `/splits`);
- this environment's additions under the same name: `GET /data_agent/capacity`,
  `GET|DELETE /data_agent/episodes/{episode_id}` (DELETE finishes the episode, frees its sandbox
  and returns its summary with the reward).

On the wire every tool takes one extra argument, `episode_id` (ROUTING_ARG), which routes the call
to its episode; it is plumbing the client fills in and never part of the schema the model sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dagent.errors import ConfigError

ENV_NAME = "data_agent"
ROUTING_ARG = "episode_id"
#: An MCP client (opencode, an IDE) that cannot pass episode_id names the episode once, in this header.
EPISODE_HEADER = "dagent-episode-id"
REWARD_COLUMN = "WhiteBoxEnv"  # TRL logs `rewards/WhiteBoxEnv/mean` (the environment class's name)


def task_api(path: str) -> str:
    """`/data_agent/<path>`: the Task API lives under the environment's name (F30)."""
    return f"/{ENV_NAME}/{path.lstrip('/')}"


def episode_path(episode_id: str) -> str:
    return task_api(f"episodes/{episode_id}")


def trainer_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Dataset rows for `GRPOTrainer(environment_factory=...)` from `TaskSuite.prompt_rows(...)`.

    TRL passes the whole row to `reset(**row)` and APPENDS what reset returns to the row's last
    user message. The row therefore names the task (`split`, `index`, and `task_id` as an identity
    check) but carries no task text: the reworded instruction comes from `reset()` at rollout time,
    so the server stays the single source of truth and the text is never sent twice.
    """
    out = []
    for row in rows:
        if "split" not in row or "index" not in row:
            raise ConfigError("each row needs `split` and `index` (TaskSuite.prompt_rows makes them)")
        kept = {k: v for k, v in row.items() if k != "prompt"}
        out.append({**kept, "prompt": [{"role": "user", "content": ""}]})
    return out
