"""The data-agent black-box Space: wiring only (`BlackboxServerSettings` from the environment, then
the runtime; docs/settings.md lists every variable).

The AGENT owns its loop (opencode, or pi); every model call goes through this Space's capture
proxy to the engine named by DAGENT_ENGINE_URL, and rollouts are graded here. A trainer points
`dagent train blackbox --env-url` (TRL's HarnessRolloutWorker through our session factory) at it.

    DAGENT_ENGINE_URL     the OpenAI-compatible engine capture forwards to (required): the training
                          job's vLLM as THIS host reaches it (the job's expose URL); the trainer asks
                          GET /data_agent_blackbox/engine to check it from here before it trains
    DAGENT_MODEL          the model id that engine serves (default: the first it lists)
    DAGENT_SUITE          task suite: a local build dir, OWNER/NAME or hf://datasets/... (default:
                          the bundled suite the image built; a Hub dataset is downloaded at start-up)
    DAGENT_HARNESS        opencode (default) or pi (local sandboxes only)
    DAGENT_PRESET         the training recipe whose episode conditions rollouts run under: sampling
                          pinned on every call, the step cap, tokens per call, the timeout (default gpu:
                          17 steps, 8,192 tokens, temperature 0.8; cpu, gpu-steps25)
    DAGENT_STEPS          the agent's step cap (default: the preset's; at most the environment's 30, F35)
    DAGENT_MAX_OUTPUT_TOKENS  what capture clamps an agent's max_tokens to (default: the preset's)
    DAGENT_SANDBOX        local (default), e2b (E2B_API_KEY) or hf (HF_TOKEN). A local backend must
                          pass the isolation self-check at start-up, else the server refuses
    PUBLIC_URL            an explicit public base URL of this server (wins); capture is then
                          published at PUBLIC_URL/capture for sandboxes on other machines
    SPACE_HOST            set by Hugging Face Spaces: a Space is already public, so by default capture
                          is served on the Space's own URL (https://SPACE_HOST/capture), no tunnel
    EXPOSE                gradio: a Gradio share tunnel instead (for hosts that are not public),
                          started once at start-up with a bounded start (F09)
    HOST, PORT            where uvicorn listens (default 0.0.0.0:8000)

Sandboxes on this host reach capture through the socket bridge (no network); remote ones through
the published URL, never a loopback one (F08). Run: `python -m server.app` from this directory.
"""

from dagent.envs.blackbox_server import space_app
from dagent.recipes import resolve
from dagent.settings import BlackboxServerSettings, listen

settings = BlackboxServerSettings.from_env()
app = space_app(settings, resolve("blackbox", settings.preset).conditions)


def main() -> None:
    import uvicorn

    from dagent.envs.whitebox_server import SERVE_SETTINGS

    uvicorn.run(app, **listen(), **SERVE_SETTINGS)


if __name__ == "__main__":
    main()
