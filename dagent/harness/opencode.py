"""The real opencode (`opencode-ai`, pinned in `dagent.sandbox.image`, from npm) as a black-box agent: it owns its loop.

Installed by scripts/setup.sh into the project's `node_modules/` (git-ignored); `find_opencode()`
locates the platform binary. Per rollout the harness writes three control files into the sandbox
and starts one FIXED launch script (`LAUNCH_SCRIPT`, no interpolation) with its paths in the
process environment:

- `opencode.json`, in opencode's REAL config schema (F31): a custom provider
  (`npm: "@ai-sdk/openai-compatible"`, `name`, `options.baseURL` = the capture session's URL,
  `options.apiKey` = the session id, `options.timeout` in ms), the model with its limits, tools
  disabled through the `tools` map (opencode turns `false` into a permission `deny` and leaves the
  tool out of the request; a top-level `"permission": "allow"` would override it, so there is
  none), and the agent's step limit at `agent.build.steps` (the key `opencode debug config`
  renders; `maxSteps` is its deprecated alias). The step limit must not exceed the environment's
  step budget (`dagent.harness.contract.check_step_cap`, F35).
- `task.md`, the instruction, fed to `opencode run` on STDIN. Never a shell word (F19): inside
  double quotes backticks run as commands; and opencode 1.18 itself rewrites a positional message
  that contains a space into `"..."` with inner quotes backslash-escaped, so even
  `"$(cat task.md)"` does not arrive verbatim. Stdin does, byte for byte.
- `forward.py`, the in-sandbox forwarder to the capture bridge, when `Reach.socket_path` is set
  (dagent.capture.reach).

HOME and every XDG_* directory point at the sandbox's own home (`sandbox.home`, which differs by
backend, F20), fresh per sandbox, so nothing leaks between rollouts; `OPENCODE_DISABLE_MODELS_FETCH=1`
skips the unreachable models list. `opencode_role_hints` labels opencode's auxiliary calls (title,
summary, compaction) by their system prompt so only the agent chain is trained (F03).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagent import settings
from dagent.capture.reach import FORWARD_START, FORWARD_STOP, FORWARDER_SOURCE, Reach
from dagent.errors import HarnessError
from dagent.harness.base import AgentRun, json_events, label_by_system_prompt
from dagent.harness.captured import write_stage
from dagent.harness.contract import check_step_cap
from dagent.sandbox.base import WORKDIR, Sandbox
from dagent.sandbox.image import OPENCODE_PACKAGE, OPENCODE_VERSION
from dagent.tools.episode import MAX_STEPS
from dagent.trajectory.turn import CapturedTurn

if TYPE_CHECKING:
    pass

PROVIDER_ID = "dagent"
DISABLED_TOOLS = ("webfetch", "task", "question")  # no egress to fetch; no sub-agents; nobody to ask
DEFAULT_STEPS = 15  # opencode's agent step limit; at most the environment's step budget (F35)
PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: System-prompt openings of opencode 1.18's auxiliary agents (title, summary, compaction).
AUX_PROMPTS = (
    ("You are a title generator", "title"),
    ("Summarize what was done in this conversation", "summary"),
    ("You are a context summarization agent", "compaction"),
)
#: Exit codes of the launch script itself (opencode never uses them).
EXIT_SETUP, EXIT_FORWARDER = 96, 97

LAUNCH_SCRIPT = (
    r"""set -u
ctl="$HOME/.dagent"
mkdir -p "$ctl" "$XDG_CONFIG_HOME/opencode" "$XDG_DATA_HOME" "$XDG_CACHE_HOME" "$XDG_STATE_HOME" \
  && mv "$DAGENT_STAGE"/* "$ctl"/ && rmdir "$DAGENT_STAGE" \
  && mv "$ctl/opencode.json" "$XDG_CONFIG_HOME/opencode/opencode.json" \
  || { echo "dagent: could not install the opencode control files" >&2; exit 96; }
"""
    + FORWARD_START
    + r"""
"$OPENCODE_BIN" run --format json --auto < "$ctl/task.md"
"""
    + FORWARD_STOP
)

#: Installs opencode at run time where the image lacks it (Debian/Ubuntu images run as root: HF).
INSTALL_SCRIPT = r"""set -e
if ! command -v npm >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm ca-certificates >/dev/null
  else
    echo "dagent: no npm and no apt-get in this image: use an image with Node.js" >&2; exit 1
  fi
fi
npm install -g --no-fund --no-audit "$DAGENT_OPENCODE" >/dev/null
"""
INSTALL_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class OpencodeConfig:
    """What the harness tells opencode besides where the proxy is."""

    model: str = "tiny-qwen3"  # the model id under the `dagent` provider (capture sends the served name)
    steps: int = DEFAULT_STEPS  # agent.build.steps
    disabled_tools: tuple[str, ...] = DISABLED_TOOLS
    request_timeout_ms: int = 600_000  # options.timeout: late turns are slow, undeclared means fail
    max_output_tokens: int = 4096  # the model's limit.output: what opencode asks for as max_tokens
    context_tokens: int = 32_768  # the model's limit.context


def render_config(config: OpencodeConfig, base_url: str, api_key: str) -> dict[str, Any]:
    """opencode.json in opencode's own schema (see the module docstring)."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "model": f"{PROVIDER_ID}/{config.model}",
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "dagent capture proxy",
                "options": {"baseURL": base_url, "apiKey": api_key, "timeout": config.request_timeout_ms},
                "models": {
                    config.model: {
                        "name": config.model,
                        "tool_call": True,
                        "temperature": True,
                        "limit": {"context": config.context_tokens, "output": config.max_output_tokens},
                    }
                },
            }
        },
        "tools": {name: False for name in config.disabled_tools},
        "agent": {"build": {"steps": config.steps}},
        "autoupdate": False,
        "share": "disabled",
        "snapshot": False,
        "lsp": False,
        "formatter": False,
    }


def opencode_env(home: str) -> dict[str, str]:
    """HOME and XDG_* under the sandbox's own home (F20); no models fetch, no update check."""
    return {
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
    }


def find_opencode(root: str | Path | None = None) -> Path:
    """The opencode binary: $DAGENT_OPENCODE_BIN, else `<root>/node_modules` (the project's), else PATH."""
    explicit = settings.read("DAGENT_OPENCODE_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise HarnessError(f"DAGENT_OPENCODE_BIN={explicit} is not an executable file")
        return Path(explicit).resolve()
    modules = Path(root or PROJECT_ROOT) / "node_modules"
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    for rel in (
        "opencode-ai/bin/opencode.exe",  # the postinstall's pick (avx2 or baseline)
        f"opencode-linux-{arch}/bin/opencode",
        f"opencode-linux-{arch}-baseline/bin/opencode",
    ):
        if os.access(modules / rel, os.X_OK):
            return (modules / rel).resolve()
    found = shutil.which("opencode")
    if found:
        return Path(found).resolve()
    raise HarnessError(
        f"{OPENCODE_PACKAGE} is not installed: run scripts/setup.sh, or "
        f"`npm install --prefix {Path(root or PROJECT_ROOT)} --no-save {OPENCODE_PACKAGE}`"
    )


def check_version(binary: str | Path, env: dict[str, str] | None = None) -> str:
    """The binary's version; HarnessError unless it is OPENCODE_VERSION (the schema this module writes)."""
    try:
        out = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env or {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")},
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"could not run {binary} --version: {e}") from e
    version = out.stdout.strip()
    if version != OPENCODE_VERSION:
        raise HarnessError(
            f"{binary} is opencode {version or '?'}; dagent writes the config schema of "
            f"{OPENCODE_VERSION}: install {OPENCODE_PACKAGE}"
        )
    return version


def rendered_agent(
    binary: str | Path, config: dict[str, Any], agent: str = "build", timeout_s: float = 120.0
) -> dict[str, Any]:
    """What opencode itself makes of `config`: `opencode debug agent <agent>` (its resolved tools
    map, permissions and step limit), run with the config installed in a throwaway HOME."""
    with tempfile.TemporaryDirectory(prefix="dagent-opencode-") as home:
        env = {**opencode_env(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        Path(env["XDG_CONFIG_HOME"], "opencode").mkdir(parents=True)
        Path(env["XDG_CONFIG_HOME"], "opencode", "opencode.json").write_text(json.dumps(config))
        try:
            out = subprocess.run(
                [str(binary), "debug", "agent", agent],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                cwd=home,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise HarnessError(f"could not run `opencode debug agent {agent}`: {e}") from e
    try:
        return json.loads(out.stdout)
    except ValueError as e:
        raise HarnessError(
            f"`opencode debug agent {agent}` did not print its configuration (exit "
            f"{out.returncode}): {(out.stderr or out.stdout)[-500:]}"
        ) from e


def check_rendered(agent: dict[str, Any], config: OpencodeConfig) -> None:
    """Fail, naming it, where opencode's RESOLVED agent differs from what was asked (F31): a tool
    meant off but enabled (an unknown key such as `disabled_tools` is silently ignored; a
    top-level `"permission": "allow"` overrides the tools map), or another step limit."""
    tools = agent.get("tools") or {}
    enabled = [name for name in config.disabled_tools if tools.get(name, True) is not False]
    if enabled:
        raise HarnessError(
            f"tools_not_disabled: opencode's rendered config leaves {', '.join(enabled)} enabled "
            "although the config disables them: use the `tools` map and no top-level "
            "`permission: allow` (F31)"
        )
    if agent.get("steps") != config.steps:
        raise HarnessError(
            f"step_limit_not_applied: opencode renders steps={agent.get('steps')!r}, "
            f"the config asks for {config.steps}: set agent.build.steps (F31)"
        )


def parse_events(stdout: str) -> dict[str, Any]:
    """What `opencode run --format json` reported: its session, tool uses, errors, last text."""
    out: dict[str, Any] = {"events": 0, "tool_uses": 0, "errors": [], "text": "", "session": None, "step_finish": []}
    for event in json_events(stdout):
        out["events"] += 1
        out["session"] = out["session"] or event.get("sessionID")
        kind, part = event.get("type"), event.get("part") or {}
        if kind == "tool_use":
            out["tool_uses"] += 1
        elif kind == "text":
            out["text"] = str(part.get("text") or "")
        elif kind == "step_finish":
            out["step_finish"].append(part.get("reason"))
        elif kind == "error":
            error = event.get("error") or {}
            out["errors"].append(str((error.get("data") or {}).get("message") or error.get("name") or error)[:300])
    return out


class OpencodeHarness:
    """Runs `opencode run` in a sandbox against a capture session (module docstring)."""

    name = "opencode"

    def __init__(
        self, config: OpencodeConfig = OpencodeConfig(), *, binary: str | None = None, max_steps: int = MAX_STEPS
    ) -> None:
        check_step_cap(config.steps, max_steps)
        self.config = config
        self.binary = binary or "opencode"  # the path INSIDE the sandbox

    def files(self, instruction: str, reach: Reach, api_key: str) -> dict[str, str]:
        """The control files, by name: opencode.json, task.md (verbatim) and, bridged, forward.py."""
        files = {
            "opencode.json": json.dumps(render_config(self.config, reach.base_url, api_key), indent=2),
            "task.md": instruction,
        }
        if reach.socket_path:
            files["forward.py"] = FORWARDER_SOURCE
        return files

    def env(self, home: str, reach: Reach, stage: str) -> dict[str, str]:
        env = {**opencode_env(home), "OPENCODE_BIN": self.binary, "DAGENT_STAGE": stage}
        if reach.socket_path:
            env.update(DAGENT_FORWARD_SOCKET=reach.socket_path, DAGENT_FORWARD_PORT=str(reach.port))
        return env

    def ensure_installed(self, sandbox: Sandbox) -> str | None:
        """Make the pinned opencode answer in a sandbox whose image may not have it: ask its version;
        if that fails, install it from npm (Node from the distribution's packages first where npm is
        missing) and ask again. Exit codes decide (0 is success, F17); once per sandbox. Returns
        None, or the `harness_install_failed: ...` cause."""
        if getattr(sandbox, "_opencode_ready", False):
            return None
        probe = f'"{self.binary}" --version'
        if (r := sandbox.exec(probe, timeout_s=60)).exit_code == 0 and r.stdout.strip() == OPENCODE_VERSION:
            sandbox._opencode_ready = True  # type: ignore[attr-defined]
            return None
        r = sandbox.exec(INSTALL_SCRIPT, timeout_s=INSTALL_TIMEOUT_S, env={"DAGENT_OPENCODE": OPENCODE_PACKAGE})
        if r.exit_code != 0:
            return (
                f"harness_install_failed: installing {OPENCODE_PACKAGE} exited "
                f"{'on a timeout' if r.timed_out else r.exit_code}: {(r.stderr or r.stdout).strip()[-300:]}"
            )
        if (r := sandbox.exec(probe, timeout_s=60)).exit_code != 0 or r.stdout.strip() != OPENCODE_VERSION:
            return (
                f"harness_install_failed: after installing {OPENCODE_PACKAGE}, `{probe}` answered exit "
                f"{r.exit_code} {r.stdout.strip()[:80]!r}, not {OPENCODE_VERSION}"
            )
        sandbox._opencode_ready = True  # type: ignore[attr-defined]
        return None

    @staticmethod
    def role_hints(turns: Iterable[CapturedTurn]) -> list[CapturedTurn]:
        return opencode_role_hints(turns)

    def launch(
        self, instruction: str, sandbox: Sandbox, reach: Reach, api_key: str, *, timeout_s: float | None = None
    ) -> AgentRun:
        """Write the control files, launch, wait. Command failures come back as data."""
        stage = write_stage(sandbox, self.files(instruction, reach, api_key))
        result = sandbox.exec(LAUNCH_SCRIPT, timeout_s=timeout_s, env=self.env(sandbox.home, reach, stage), cwd=WORKDIR)
        events = parse_events(result.stdout)
        cause = None
        if result.exit_code in (EXIT_SETUP, EXIT_FORWARDER) and not events["events"]:
            cause = "harness_crash"
        return AgentRun(
            exec_result=result,
            cause=cause,
            metadata={
                "opencode": {k: v for k, v in events.items() if k != "text"},
                "final_text": events["text"][:500],
                "stderr": result.stderr[-2000:],
            },
        )


def opencode_role_hints(turns: Iterable[CapturedTurn]) -> list[CapturedTurn]:
    """Label opencode's auxiliary calls by role (F03): the title generator, the session summary and
    the compaction summariser, recognised by their system prompts."""
    return label_by_system_prompt(turns, AUX_PROMPTS)
