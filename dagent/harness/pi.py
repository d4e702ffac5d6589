"""pi (`@mariozechner/pi-coding-agent`, pinned in `dagent.sandbox.image`, from npm) as a second black-box agent: it
owns its
loop, speaks to an OpenAI-compatible URL, and goes through the same capture proxy as opencode.

Installed by scripts/setup.sh into the project's `node_modules/` (a plain Node ESM script, run with
the system's `node`, >= 20.6); the sandbox gets `node_modules` bound read-only at the same path.
Per rollout the harness stages its control files and runs one FIXED launch script
(`LAUNCH_SCRIPT`, no interpolation; values reach it through the process environment):

- `models.json` (pi's custom-provider schema, in `$PI_CODING_AGENT_DIR`): provider `dagent`,
  `api: "openai-completions"` (POST {baseURL}/chat/completions, always streamed), the capture
  session's base URL, `apiKey` = the NAME of an environment variable holding the session key (pi
  0.73 resolves `process.env[value] || value`; `"$NAME"` would be taken literally), and a `compat`
  block so it sends plain `max_tokens`, no `store`, a `system` role; the model's context window
  and output cap.
- `settings.json`: the default provider/model, thinking off, compaction OFF (its summariser is an
  extra model call; if it ever runs, `pi_role_hints` labels it auxiliary, F03), retries off (a dead
  endpoint would otherwise cost ~20 s of retries per rollout).
- `dagent_ext.ts`, a pi extension: a turn cap (pi has no step limit of its own; `PI_MAX_TURNS`
  aborts after N turns) and a dump of the EFFECTIVE configuration before the first model call
  (`PI_DUMP_CONFIG`): model, base URL and the active tools. pi silently drops tool names it does
  not know from `--tools`, so what was asked is checked against what runs (F31).
- `task.md`, the instruction, on STDIN (never a shell word, F19).

Flags: `--mode json --no-session` (events on stdout, no session file), `--tools bash,read`, and
every discovery switched off (`--no-extensions -e dagent_ext.ts --no-skills --no-prompt-templates
--no-themes --no-context-files`): a task directory's `AGENTS.md` or `.pi/` is not read.
`PI_OFFLINE=1`: no start-up network (pi otherwise downloads rg/fd for grep/find).

pi never sends temperature or top_p; capture pins the recipe's sampling on every call (F05). In
json mode pi exits 0 even when the endpoint failed; the capture proxy's findings decide the cause
(`infra_cause`). pi appends messages (the second request's messages start with the first's),
re-serialising tool-call arguments compactly, so transitions realign by a few tokens rather than
fork. Its cost per rollout: benchmarks/README.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagent import settings
from dagent.capture.reach import FORWARD_START, FORWARD_STOP, FORWARDER_SOURCE, Reach
from dagent.errors import HarnessError
from dagent.harness.base import AgentRun, json_events, label_by_system_prompt
from dagent.harness.captured import write_stage
from dagent.harness.contract import check_step_cap
from dagent.sandbox.base import WORKDIR, Sandbox
from dagent.sandbox.image import PI_PACKAGE, PI_VERSION
from dagent.tools.episode import MAX_STEPS
from dagent.trajectory.messages import content_text
from dagent.trajectory.turn import CapturedTurn

PROVIDER_ID = "dagent"
KEY_VARIABLE = "DAGENT_API_KEY"
DEFAULT_TOOLS = ("bash", "read")  # pi's grep/find need rg/fd (downloaded on first use); edit/write unneeded
DEFAULT_STEPS = 15
PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: System-prompt openings of pi's calls. The agent's own; the compaction summariser (auxiliary).
AGENT_PROMPT = "You are an expert coding assistant operating inside pi"
AUX_PROMPTS = (("You are a context summarization assistant", "compaction"),)

EXTENSION = r"""import { writeFileSync } from "node:fs";
export default function (pi: any) {
  const max = Number(process.env.PI_MAX_TURNS || "0");
  let turns = 0;
  pi.on("turn_end", async (_e: any, ctx: any) => {
    turns += 1;
    if (max > 0 && turns >= max) {
      process.stderr.write(`dagent: reached PI_MAX_TURNS=${max}, stopping\n`);
      ctx.abort();
    }
  });
  pi.on("before_agent_start", async (e: any, ctx: any) => {
    const out = process.env.PI_DUMP_CONFIG;
    if (!out) return;
    const m = ctx.model;
    writeFileSync(out, JSON.stringify({
      model: m && { provider: m.provider, id: m.id, api: m.api, baseUrl: m.baseUrl,
                    contextWindow: m.contextWindow, maxTokens: m.maxTokens },
      activeTools: pi.getActiveTools(),
      maxTurns: max,
    }));
  });
}
"""

LAUNCH_SCRIPT = (
    r"""set -u
ctl="$HOME/.dagent"
mkdir -p "$ctl" "$PI_CODING_AGENT_DIR" "$TMPDIR" "$XDG_CONFIG_HOME" "$XDG_CACHE_HOME" "$XDG_DATA_HOME" \
    "$XDG_STATE_HOME" \
  && mv "$DAGENT_STAGE"/* "$ctl"/ && rmdir "$DAGENT_STAGE" \
  && mv "$ctl/models.json" "$ctl/settings.json" "$PI_CODING_AGENT_DIR"/ \
  || { echo "dagent: could not install the pi control files" >&2; exit 96; }
"""
    + FORWARD_START
    + r"""
node "$PI_CLI" --mode json --no-session --model "$PI_MODEL" --tools "$PI_TOOLS" \
  --no-extensions -e "$ctl/dagent_ext.ts" --no-skills --no-prompt-templates --no-themes --no-context-files \
  < "$ctl/task.md"
"""
    + FORWARD_STOP
)


@dataclass(frozen=True)
class PiConfig:
    """What the harness tells pi besides where the proxy is."""

    model: str = "tiny-qwen3"
    steps: int = DEFAULT_STEPS  # turns (model calls) before the extension stops the agent
    tools: tuple[str, ...] = DEFAULT_TOOLS
    max_output_tokens: int = 4096
    context_tokens: int = 32_768
    request_timeout_ms: int = 600_000
    compaction_reserve_tokens: int | None = None  # None: compaction off; else pi summarises (an auxiliary
    # call) once the context passes context_tokens - this many tokens


def render_models(config: PiConfig, base_url: str) -> dict[str, Any]:
    """models.json in pi 0.73's schema (module docstring)."""
    return {
        "providers": {
            PROVIDER_ID: {
                "baseUrl": base_url,
                "api": "openai-completions",
                "apiKey": KEY_VARIABLE,
                "compat": {
                    "supportsDeveloperRole": False,
                    "supportsReasoningEffort": False,
                    "supportsStore": False,
                    "supportsUsageInStreaming": True,
                    "maxTokensField": "max_tokens",
                },
                "models": [
                    {
                        "id": config.model,
                        "name": config.model,
                        "reasoning": False,
                        "input": ["text"],
                        "contextWindow": config.context_tokens,
                        "maxTokens": config.max_output_tokens,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    }
                ],
            }
        }
    }


def render_settings(config: PiConfig) -> dict[str, Any]:
    compaction: dict[str, Any] = {"enabled": False}
    if config.compaction_reserve_tokens is not None:
        compaction = {
            "enabled": True,
            "reserveTokens": config.compaction_reserve_tokens,
            "keepRecentTokens": max(1, config.compaction_reserve_tokens // 2),
        }
    return {
        "defaultProvider": PROVIDER_ID,
        "defaultModel": config.model,
        "defaultThinkingLevel": "off",
        "quietStartup": True,
        "enableInstallTelemetry": False,
        "compaction": compaction,
        "retry": {"enabled": False, "provider": {"maxRetries": 0, "timeoutMs": config.request_timeout_ms}},
    }


def pi_env(home: str) -> dict[str, str]:
    """HOME, XDG_*, pi's agent dir and TMPDIR (its extension compiler writes there) under the
    sandbox's own home (F20); no start-up network."""
    return {
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "PI_CODING_AGENT_DIR": f"{home}/.pi/agent",
        "TMPDIR": f"{home}/.tmp",
        "PI_OFFLINE": "1",
        "PI_SKIP_VERSION_CHECK": "1",
        "PI_TELEMETRY": "0",
        "NO_COLOR": "1",
    }


def find_pi(root: str | Path | None = None) -> Path:
    """pi's CLI script: $DAGENT_PI_CLI, else the project's `node_modules`."""
    explicit = settings.read("DAGENT_PI_CLI")
    if explicit:
        if not Path(explicit).is_file():
            raise HarnessError(f"DAGENT_PI_CLI={explicit} is not a file")
        return Path(explicit).resolve()
    cli = Path(root or PROJECT_ROOT) / "node_modules" / "@mariozechner" / "pi-coding-agent" / "dist" / "cli.js"
    if cli.is_file():
        return cli.resolve()
    raise HarnessError(
        f"{PI_PACKAGE} is not installed: run scripts/setup.sh, or `npm install --prefix "
        f"{Path(root or PROJECT_ROOT)} --no-save {PI_PACKAGE}`"
    )


def modules_dir(cli: Path) -> Path:
    """The `node_modules` directory pi's CLI lives in (bound into sandboxes whole)."""
    for parent in cli.parents:
        if parent.name == "node_modules":
            return parent
    raise HarnessError(f"{cli} is not inside a node_modules directory")


def check_version(cli: str | Path) -> str:
    """The package's version (from its package.json); HarnessError unless it is PI_VERSION, and
    unless `node` is on PATH (pi is a Node script)."""
    if shutil.which("node") is None:
        raise HarnessError("pi needs Node.js >= 20.6 on PATH (`node`): install nodejs")
    package = Path(cli).resolve().parents[1] / "package.json"
    try:
        version = json.loads(package.read_text())["version"]
    except (OSError, ValueError, KeyError) as e:
        raise HarnessError(f"cannot read pi's version from {package}: {e}") from e
    if version != PI_VERSION:
        raise HarnessError(
            f"{cli} is pi {version}; dagent writes the config schema of {PI_VERSION}: install {PI_PACKAGE}"
        )
    return version


def effective_config(cli: str | Path, config: PiConfig, timeout_s: float = 120.0) -> dict[str, Any]:
    """What pi ITSELF runs with for `config`: the extension's dump of the resolved model and the
    active tools, from a run against an address where nothing listens (it fails at its first model
    call, after the dump; retries are off)."""
    with tempfile.TemporaryDirectory(prefix="dagent-pi-") as home:
        env = {
            **pi_env(home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            KEY_VARIABLE: "probe",
            "PI_DUMP_CONFIG": f"{home}/effective.json",
            "PI_MAX_TURNS": str(config.steps),
        }
        agent_dir = Path(env["PI_CODING_AGENT_DIR"])
        agent_dir.mkdir(parents=True)
        Path(env["TMPDIR"]).mkdir(parents=True)
        (agent_dir / "models.json").write_text(json.dumps(render_models(config, "http://127.0.0.1:1/v1")))
        (agent_dir / "settings.json").write_text(json.dumps(render_settings(config)))
        (Path(home) / "dagent_ext.ts").write_text(EXTENSION)
        try:
            out = subprocess.run(
                [
                    "node",
                    str(cli),
                    "--mode",
                    "json",
                    "--no-session",
                    "--model",
                    f"{PROVIDER_ID}/{config.model}",
                    "--tools",
                    ",".join(config.tools),
                    "--no-extensions",
                    "-e",
                    f"{home}/dagent_ext.ts",
                    "--no-skills",
                    "--no-prompt-templates",
                    "--no-themes",
                    "--no-context-files",
                ],
                input="probe",
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                cwd=home,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise HarnessError(f"could not run pi to read its effective configuration: {e}") from e
        dump = Path(env["PI_DUMP_CONFIG"])
        if not dump.is_file():
            raise HarnessError(
                f"pi did not report its configuration (exit {out.returncode}): {(out.stderr or out.stdout)[-500:]}"
            )
        return json.loads(dump.read_text())


def check_effective(effective: dict[str, Any], config: PiConfig) -> None:
    """Fail, naming it, where pi's effective configuration differs from what was asked (F31)."""
    active = list(effective.get("activeTools") or [])
    if sorted(active) != sorted(config.tools):
        raise HarnessError(
            f"tools_not_applied: pi runs with tools {active} but the harness asked for "
            f"{list(config.tools)} (pi drops tool names it does not know without a word): use "
            "pi's own tool names (bash, read, edit, write, grep, find, ls) (F31)"
        )
    model = effective.get("model") or {}
    if model.get("id") != config.model or model.get("api") != "openai-completions":
        raise HarnessError(
            f"model_not_applied: pi resolved model {model.get('id')!r} over {model.get('api')!r}, "
            f"not {config.model!r} over openai-completions: check models.json (F31)"
        )
    if effective.get("maxTurns") != config.steps:
        raise HarnessError(
            f"step_limit_not_applied: the turn cap reads {effective.get('maxTurns')!r}, the harness "
            f"asked for {config.steps} (F31)"
        )


def parse_events(stdout: str) -> dict[str, Any]:
    """What `pi --mode json` reported: tool executions, the last assistant stop reason and error, text."""
    out: dict[str, Any] = {"events": 0, "tool_uses": 0, "errors": [], "text": "", "stop": None, "turns": 0}
    for event in json_events(stdout):
        out["events"] += 1
        kind = event.get("type")
        if kind == "tool_execution_start":
            out["tool_uses"] += 1
        elif kind == "turn_end":
            out["turns"] += 1
        elif kind == "message_end":
            message = event.get("message") or {}
            if message.get("role") == "assistant":
                out["stop"] = message.get("stopReason")
                if message.get("errorMessage"):
                    out["errors"].append(str(message["errorMessage"])[:300])
                text = content_text(message.get("content") or [], part_type="text")
                out["text"] = text or out["text"]
    return out


class PiHarness:
    """Runs pi in a sandbox against a capture session (module docstring). The same interface as
    `OpencodeHarness`: `config.steps`, `files`, `env`, `launch`, `role_hints`, `binds`."""

    name = "pi"

    def __init__(self, config: PiConfig = PiConfig(), *, cli: str | None = None, max_steps: int = MAX_STEPS) -> None:
        check_step_cap(config.steps, max_steps)
        self.config = config
        self.cli = cli or "pi"

    def prepare(self) -> list[tuple[str, str]]:
        """On the host, before sandboxes: find pi, check its version and its EFFECTIVE configuration
        (F31); the read-only binds a local sandbox needs (the node_modules pi lives in)."""
        cli = find_pi()
        check_version(cli)
        check_effective(effective_config(cli, self.config), self.config)
        self.cli = str(cli)
        modules = str(modules_dir(cli))
        return [(modules, modules)]

    def files(self, instruction: str, reach: Reach, api_key: str) -> dict[str, str]:
        files = {
            "models.json": json.dumps(render_models(self.config, reach.base_url), indent=2),
            "settings.json": json.dumps(render_settings(self.config), indent=2),
            "dagent_ext.ts": EXTENSION,
            "task.md": instruction,
        }
        if reach.socket_path:
            files["forward.py"] = FORWARDER_SOURCE
        return files

    def env(self, home: str, reach: Reach, stage: str, api_key: str) -> dict[str, str]:
        env = {
            **pi_env(home),
            "PI_CLI": self.cli,
            "PI_MODEL": f"{PROVIDER_ID}/{self.config.model}",
            "PI_TOOLS": ",".join(self.config.tools),
            "PI_MAX_TURNS": str(self.config.steps),
            KEY_VARIABLE: api_key,
            "DAGENT_STAGE": stage,
        }
        if reach.socket_path:
            env.update(DAGENT_FORWARD_SOCKET=reach.socket_path, DAGENT_FORWARD_PORT=str(reach.port))
        return env

    def ensure_installed(self, sandbox: Sandbox) -> str | None:
        """Remote images are not provisioned for pi: a rollout there is refused before any call."""
        return (
            f"harness_install_failed: {PI_PACKAGE} is installed on local sandboxes only (bound from the host); "
            "use opencode on remote backends"
        )

    def launch(
        self, instruction: str, sandbox: Sandbox, reach: Reach, api_key: str, *, timeout_s: float | None = None
    ) -> AgentRun:
        stage = write_stage(sandbox, self.files(instruction, reach, api_key))
        result = sandbox.exec(
            LAUNCH_SCRIPT, timeout_s=timeout_s, env=self.env(sandbox.home, reach, stage, api_key), cwd=WORKDIR
        )
        events = parse_events(result.stdout)
        cause = "harness_crash" if result.exit_code in (96, 97) and not events["events"] else None
        return AgentRun(
            exec_result=result,
            cause=cause,
            metadata={
                "pi": {k: v for k, v in events.items() if k != "text"},
                "final_text": events["text"][:500],
                "stderr": result.stderr[-2000:],
            },
        )

    @staticmethod
    def role_hints(turns: Iterable[CapturedTurn]) -> list[CapturedTurn]:
        return pi_role_hints(turns)


def pi_role_hints(turns: Iterable[CapturedTurn]) -> list[CapturedTurn]:
    """Label pi's auxiliary calls by their system prompt (F03): the compaction summariser."""
    return label_by_system_prompt(turns, AUX_PROMPTS, messages=1, starts=True)
