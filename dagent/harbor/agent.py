"""opencode as a Harbor agent, configured exactly as dagent's black-box harness configures it.

    harbor run -p TASK -a dagent.harbor.agent:OpencodeAgent \
        --ak capture_url=http://127.0.0.1:18080/v1 --ak api_key=SESSION --ak model=tiny-qwen3 \
        --ak opencode_bin=/path/to/opencode -e dagent.harbor.provider:SandboxEnvironment \
        --ek capture_host=127.0.0.1 --ek capture_port=PORT --ek ro_binds=/path/to

The control files (opencode.json in opencode's real schema, F31; the instruction on stdin, F19)
and the launch script are `dagent.harness.opencode`'s own, so a Harbor rollout and a black-box
environment rollout drive the same opencode the same way. The base URL is a capture session
(the api key is its id): the capture proxy, not Harbor, records the model calls, their token ids
and logprobs. The agent leaves `dagent-run.json` (exit code, opencode's event summary, stderr
tail) in its log directory for the caller (`dagent.runtime.blackbox`, harbor mode).

Harbor's own `opencode` agent installs opencode with npm or curl inside the environment at
set-up; offline that fails, and it writes its own config. This agent installs nothing: the
binary is given (`opencode_bin`, bound read-only into the sandbox by the provider's `ro_binds`).
"""

from __future__ import annotations

import json
import secrets
import tempfile
from pathlib import Path
from typing import Any

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

from dagent.core.task import WORKDIR
from dagent.harness.opencode import LAUNCH_SCRIPT, OpencodeConfig, opencode_env, parse_events, render_config
from dagent.sandbox.image import OPENCODE_VERSION

RUN_RECORD = "dagent-run.json"


class OpencodeAgent(BaseAgent):
    """`opencode run` against a capture session (see the module docstring)."""

    def __init__(
        self,
        logs_dir: Path,
        model_name: str | None = None,
        *,
        capture_url: str | None = None,
        api_key: str = "",
        opencode_bin: str = "opencode",
        model: str = "tiny-qwen3",
        steps: int | str = 15,
        max_output_tokens: int | str = 4096,
        context_tokens: int | str = 32_768,
        timeout_s: float | str = 600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(logs_dir=logs_dir, model_name=model_name, **kwargs)
        if not capture_url:
            raise ValueError(
                "dagent's opencode agent needs --ak capture_url=<the capture session's URL "
                "as the sandbox sees it> and --ak api_key=<the session id>"
            )
        self.capture_url, self.api_key, self.binary = capture_url, api_key, opencode_bin
        self.config = OpencodeConfig(
            model=model, steps=int(steps), max_output_tokens=int(max_output_tokens), context_tokens=int(context_tokens)
        )
        self.timeout_s = float(timeout_s)

    @staticmethod
    def name() -> str:
        return "dagent-opencode"

    def version(self) -> str | None:
        return OPENCODE_VERSION

    async def setup(self, environment: BaseEnvironment) -> None:
        r = await environment.exec(f"test -x {self.binary} && {self.binary} --version")
        if r.return_code != 0 or (r.stdout or "").strip() != OPENCODE_VERSION:
            raise RuntimeError(
                f"opencode {OPENCODE_VERSION} is not runnable at {self.binary} in the "
                f"environment (exit {r.return_code}: {(r.stderr or r.stdout or '')[-300:]}): "
                "bind it with --ek ro_binds=<its directory>"
            )

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        home = ((await environment.exec('printf %s "$HOME"')).stdout or "").strip() or "/root"  # F20
        stage = f"{WORKDIR}/.dagent-{secrets.token_hex(6)}"
        files = {
            "opencode.json": json.dumps(render_config(self.config, self.capture_url, self.api_key), indent=2),
            "task.md": instruction,
        }
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in files.items():
                Path(tmp, name).write_text(text)
                await environment.upload_file(Path(tmp, name), f"{stage}/{name}")
        env = {**opencode_env(home), "OPENCODE_BIN": self.binary, "DAGENT_STAGE": stage}
        result = await environment.exec(LAUNCH_SCRIPT, cwd=WORKDIR, env=env, timeout_sec=int(self.timeout_s))
        events = parse_events(result.stdout or "")
        record = {
            "exit_code": result.return_code,
            "opencode": {k: v for k, v in events.items() if k != "text"},
            "final_text": events["text"][:500],
            "stderr": (result.stderr or "")[-2000:],
        }
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        (self.logs_dir / RUN_RECORD).write_text(json.dumps(record, indent=2))
        (self.logs_dir / "opencode.jsonl").write_text(result.stdout or "")
        context.metadata = {**(context.metadata or {}), "dagent": {k: record[k] for k in ("exit_code", "opencode")}}
