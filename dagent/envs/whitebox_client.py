"""HTTP client for the white-box server. Never imports the server (nor openenv).

- `WhiteBoxHTTP`: plain access to every route, returning plain values: protocol envelopes are
  unwrapped here, once (F29) -- JSON-RPC `{"result": ...}`, MCP's `{"content": [{"text": ...}]}`
  (and `structuredContent` / openenv's snake_case `structured_content` / `data`), and FastMCP's
  `{"result": ...}` wrapper around a non-object return. Routes come from `dagent.envs.contract`,
  so the Task API is reached at `/data_agent/...`, never `/splits` (F30).
- `white_box_client(base_url, tools)`: the class to hand TRL as `environment_factory`. Its public
  methods are exactly the selected tools plus `reset(**row)` and `get_reward()`, generated from
  the same registry as the server's tools; on first use it checks that the server serves exactly
  that set and fails naming both sets otherwise (F25).

A transport failure during a tool call comes back to the model as an error result AND marks the
episode as infrastructure-failed, so `get_reward()` returns None instead of a reward for a
trajectory the server never saw whole (F32).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from dagent.envs.contract import ENV_NAME, REWARD_COLUMN, ROUTING_ARG, episode_path, task_api
from dagent.errors import ConfigError, DagentError
from dagent.tools import ToolResult, select, tool_function
from dagent.trajectory.messages import content_text


class EnvServerError(DagentError):
    """The white-box server answered with an error or could not be reached."""


# ------------------------------------------------------------------ envelopes (F29)

_TOOL_RESULT_KEYS = {"content", "structuredContent", "structured_content", "data", "isError", "is_error"}


def _strip_result_key(value: Any) -> Any:
    while isinstance(value, dict) and set(value) == {"result"}:  # FastMCP wraps non-object returns
        value = value["result"]
    return value


def _maybe_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def unwrap(payload: Any) -> tuple[Any, bool]:
    """(plain value, is_error) from a JSON-RPC response, an MCP tool result, or a bare value."""
    value, is_error = payload, False
    if isinstance(value, dict) and "jsonrpc" in value:
        if value.get("error"):
            err = value["error"]
            raise EnvServerError(f"JSON-RPC error {err.get('code')}: {err.get('message')}")
        value = value.get("result")
    if (
        isinstance(value, dict)
        and value
        and set(value) <= _TOOL_RESULT_KEYS | {"meta", "_meta"}
        and set(value) & _TOOL_RESULT_KEYS
    ):
        is_error = bool(value.get("isError", value.get("is_error", False)))
        for key in ("structuredContent", "structured_content", "data"):
            if value.get(key) is not None:
                value = value[key]
                break
        else:
            parts = value.get("content") or []
            value = _maybe_json(content_text(list(parts)))
    return _strip_result_key(value), is_error


def unwrap_tool_result(payload: Any) -> ToolResult:
    """A ToolResult from whatever envelope the server wrapped a tool's return in."""
    value, is_error = unwrap(payload)
    if isinstance(value, dict) and "ok" in value and "output" in value:
        return ToolResult(bool(value["ok"]) and not is_error, str(value["output"]))
    text = value if isinstance(value, str) else json.dumps(value)
    return ToolResult(not is_error, text)


# ------------------------------------------------------------------ plain HTTP access

_CLIENTS: dict[tuple[str, float], httpx.Client] = {}
_CLIENTS_LOCK = threading.Lock()


def _shared_client(base_url: str, timeout_s: float) -> httpx.Client:
    with _CLIENTS_LOCK:
        key = (base_url, timeout_s)
        if key not in _CLIENTS:
            _CLIENTS[key] = httpx.Client(
                base_url=base_url,
                timeout=timeout_s,
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            )
        return _CLIENTS[key]


class WhiteBoxHTTP:
    """Every route of the white-box server, returning plain values."""

    def __init__(self, base_url: str, *, timeout_s: float = 300.0, headers: dict[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = (
            httpx.Client(base_url=self.base_url, timeout=timeout_s, headers=headers)
            if headers
            else _shared_client(self.base_url, timeout_s)
        )
        self._rpc_id = 0

    def _request(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise EnvServerError(
                f"cannot reach the white-box server at {self.base_url}{path}: {type(e).__name__}: {e}"
            ) from e
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            hint = " (the Task API is under /%s/...)" % ENV_NAME if r.status_code == 404 else ""
            raise EnvServerError(f"{method} {path} -> {r.status_code}: {detail}{hint}")
        return r.json()

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def splits(self) -> list[str]:
        return [s["name"] if isinstance(s, dict) else str(s) for s in self._request("GET", task_api("splits"))]

    def num_tasks(self, split: str) -> int:
        return int(self._request("POST", task_api("num_tasks"), json={"split": split})["num_tasks"])

    def task(self, split: str, index: int) -> dict[str, Any]:
        return self._request("POST", task_api("task"), json={"split": split, "index": index})["task"]

    def capacity(self) -> dict[str, Any]:
        return self._request("GET", task_api("capacity"))

    def _rpc(self, method: str, params: dict[str, Any]) -> Any:
        self._rpc_id += 1
        return self._request(
            "POST", "/mcp", json={"jsonrpc": "2.0", "id": self._rpc_id, "method": method, "params": params}
        )

    def list_tools(self) -> list[dict[str, Any]]:
        value, _ = unwrap(self._rpc("tools/list", {}))
        return list(value["tools"])

    def reset(self, split: str, index: int, **row: Any) -> dict[str, Any]:
        """Start an episode; the plain observation (`instruction`, `episode_id`, ...)."""
        body = {k: v for k, v in row.items() if k != "prompt" and _jsonable(v)}  # the text comes from reset
        return self._request("POST", "/reset", json={**body, "split": split, "index": index})["observation"]

    def call_tool(self, episode_id: str, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        payload = self._rpc("tools/call", {"name": name, "arguments": {**(arguments or {}), ROUTING_ARG: episode_id}})
        return unwrap_tool_result(payload)

    def episode(self, episode_id: str) -> dict[str, Any]:
        return self._request("GET", episode_path(episode_id))

    def finish(self, episode_id: str) -> dict[str, Any]:
        """Finish the episode and free its sandbox; its summary, with `reward` (None when ungraded)."""
        return self._request("DELETE", episode_path(episode_id))


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------ face 3: the TRL class over HTTP


class _RemoteEnv:
    """Base of the client class. Only `reset` and `get_reward` are public besides the tools."""

    _base_url: str
    _tools: tuple[str, ...]
    _timeout_s: float
    _headers: dict[str, str] | None
    _checked: bool = False

    def __init__(self) -> None:
        self._server = WhiteBoxHTTP(self._base_url, timeout_s=self._timeout_s, headers=self._headers)
        self._episode_id: str | None = None
        self._infra_error: str | None = None
        self._reward: tuple[float | None] | None = None

    def reset(self, split: Any = None, index: Any = None, **row: Any) -> str:
        """Start the episode the dataset row names by `split` and `index`; returns its instruction."""
        self._check_surface()
        self._release()
        obs = self._server.reset(split, index, **row)
        self._episode_id, self._infra_error, self._reward = obs["episode_id"], None, None
        return obs["instruction"]

    def get_reward(self) -> float | None:
        """The episode's reward from the server; None when ungraded or the server was lost (F32)."""
        if self._reward is None:
            if self._episode_id is None:
                return None
            try:
                summary = self._server.finish(self._episode_id)
                self._reward = (None if self._infra_error else summary["reward"],)
            except EnvServerError as e:
                self._infra_error = self._infra_error or str(e)
                self._reward = (None,)
        return self._reward[0]

    def _call(self, name: str, arguments: Any) -> str:
        if self._episode_id is None:
            return ToolResult(False, "no episode is running: reset first").render()
        if not isinstance(arguments, dict):
            return ToolResult(False, f"bad arguments for {name}: {arguments}").render()
        try:
            return self._server.call_tool(self._episode_id, name, arguments).render()
        except EnvServerError as e:
            self._infra_error = str(e)
            return ToolResult(False, f"the environment server failed: {e}").render()

    def _release(self) -> None:
        if self._episode_id is not None and self._reward is None:
            try:
                self._server.finish(self._episode_id)
            except EnvServerError:
                pass
        self._episode_id = None

    @classmethod
    def _check_surface(cls) -> None:
        if cls._checked:
            return
        served = {
            t["name"] for t in WhiteBoxHTTP(cls._base_url, timeout_s=cls._timeout_s, headers=cls._headers).list_tools()
        }
        if served != set(cls._tools):
            raise ConfigError(
                f"the server at {cls._base_url} serves {sorted(served)} but this client offers "
                f"{sorted(cls._tools)} to the model: start the server with DAGENT_TOOLS matching, "
                "or build the client with the server's selection (F25)"
            )
        cls._checked = True


def white_box_client(
    base_url: str, tools: Any = None, *, timeout_s: float = 300.0, headers: dict[str, str] | None = None
) -> type:
    """The class for `GRPOTrainer(environment_factory=white_box_client(url))` against a server."""
    names = select(tools)
    namespace: dict[str, Any] = {
        "_base_url": base_url.rstrip("/"),
        "_tools": names,
        "_timeout_s": timeout_s,
        "_headers": headers,
        "_checked": False,
        "__module__": __name__,
    }
    for name in names:
        namespace[name] = tool_function(name, _RemoteEnv._call, receiver=True)
    return type(REWARD_COLUMN, (_RemoteEnv,), namespace)
