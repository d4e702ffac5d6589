"""The data-agent white-box Space: wiring only (settings from the environment, then `create_app`).

    DAGENT_SUITE          task suite: a local build dir, OWNER/NAME or hf://datasets/...
                          (default: the bundled suite `dagent suite build` makes, which the image
                          builds at build time; a Hub dataset is downloaded at start-up)
    DAGENT_TOOLS          toolsets: bash, seta or bash,seta (default both; submit_solution always)
    DAGENT_MAX_EPISODES   episodes running at once (default 64)
    DAGENT_MAX_STEPS      tool calls per episode before only submit_solution is allowed (default 30)
    DAGENT_OUTPUT_CHARS   tool output is clipped to this many characters (default 1200)
    DAGENT_COMMAND_TIMEOUT_S, DAGENT_TOOL_WORKERS, DAGENT_IDLE_TIMEOUT_S
    DAGENT_MCP_HANDLER    lean (default) or openenv (openenv's own POST /mcp, for measuring it)
    DAGENT_SANDBOX_IMAGE  the hf sandbox's image (one with the data stack; checked by running an oracle)
    DAGENT_SANDBOX        local (default), e2b (E2B_API_KEY) or hf (HF_TOKEN): where agent commands
                          run. A local backend must pass the isolation self-check at start-up (no
                          gold within an agent's reach): bubblewrap where namespaces are allowed,
                          else Landlock + seccomp; where neither works the server refuses and names
                          the fix (a cloud backend)
    DAGENT_ISOLATION      auto (default), bwrap, landlock or rlimits: the local sandbox tier
    HOST, PORT            where uvicorn listens (default 0.0.0.0:8000)

Run: `python -m server.app` from this directory (what the Dockerfile's CMD does).
"""

import os

from dagent.envs.server import DEFAULT_MAX_EPISODES, create_app
from dagent.sandbox import get_backend
from dagent.tools.episode import EpisodeConfig

_DEFAULTS = EpisodeConfig()

app = create_app(
    os.environ.get("DAGENT_SUITE") or None,
    tools=os.environ.get("DAGENT_TOOLS") or None,
    max_episodes=int(os.environ.get("DAGENT_MAX_EPISODES", DEFAULT_MAX_EPISODES)),
    config=EpisodeConfig(
        max_steps=int(os.environ.get("DAGENT_MAX_STEPS", _DEFAULTS.max_steps)),
        output_chars=int(os.environ.get("DAGENT_OUTPUT_CHARS", _DEFAULTS.output_chars)),
        command_timeout_s=float(os.environ.get("DAGENT_COMMAND_TIMEOUT_S", _DEFAULTS.command_timeout_s)),
        idle_timeout_s=float(os.environ.get("DAGENT_IDLE_TIMEOUT_S", _DEFAULTS.idle_timeout_s)),
    ),
    tool_workers=int(os.environ["DAGENT_TOOL_WORKERS"]) if os.environ.get("DAGENT_TOOL_WORKERS") else None,
    mcp_handler=os.environ.get("DAGENT_MCP_HANDLER", "lean"),
    backend=None if os.environ.get("DAGENT_SANDBOX", "local") == "local" else get_backend(os.environ["DAGENT_SANDBOX"]),
)


def main() -> None:
    import uvicorn

    from dagent.envs.server import SERVE_SETTINGS

    uvicorn.run(app, host=os.environ.get("HOST", "0.0.0.0"), port=int(os.environ.get("PORT", "8000")),
                log_level=os.environ.get("LOG_LEVEL", "info"), **SERVE_SETTINGS)


if __name__ == "__main__":
    main()
