"""The data-agent white-box Space: wiring only (`WhiteboxServerSettings` from the environment, then
`space_app`; docs/settings.md lists every variable).

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

from dagent.envs.whitebox_server import space_app
from dagent.settings import WhiteboxServerSettings, listen

app = space_app(WhiteboxServerSettings.from_env())


def main() -> None:
    import uvicorn

    from dagent.envs.whitebox_server import SERVE_SETTINGS

    uvicorn.run(app, **listen(), **SERVE_SETTINGS)


if __name__ == "__main__":
    main()
