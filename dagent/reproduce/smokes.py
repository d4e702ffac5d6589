"""The smoke stages of `dagent reproduce`: one white-box episode and one black-box rollout, each over
its server's HTTP, and the oracle through `harbor run` on an exported catalog; the loopback server
they run on and the payload read as a rollout."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dagent.engine.process import LocalEngineProcess
from dagent.envs.blackbox_server import create_app
from dagent.envs.whitebox_client import WhiteBoxHTTP
from dagent.errors import DagentError
from dagent.harbor.job import harbor_binary, run_harbor
from dagent.harness.opencode import OpencodeConfig
from dagent.reproduce.stages import Stage, StageError
from dagent.runtime.blackbox import BlackBoxRuntime
from dagent.serving import ThreadedServer
from dagent.train.blackbox.rollouts import row_of


def smoke_whitebox(stage: Stage, suite: Any, split: str) -> None:
    """One episode on the white-box server over HTTP: the reference program through `bash`, its output
    filed with `submit_solution`, graded there."""
    from dagent.envs.whitebox_server import create_app

    with _Served(create_app(suite, tools="bash")) as url:
        http = WhiteBoxHTTP(url)
        index = 0
        task = suite.task_at(split, index)
        episode = http.reset(split, index)
        eid = episode["episode_id"]
        ran = http.call_tool(eid, "bash", {"command": "python3 - <<'DAGENT_EOF'\n" + task.solution + "\nDAGENT_EOF"})
        http.call_tool(eid, "submit_solution", {"answer": ran.output.strip()})
        graded = http.finish(eid)
    stage.command = (
        "the white-box server (dagent.envs.whitebox_server.create_app) over HTTP: reset, bash, submit_solution"
    )
    outcome = "ungraded" if graded.get("correct") is None else "correct" if graded["correct"] else "wrong"
    stage.receipt = {
        "task": task.task_id,
        "outcome": outcome,
        "reward": graded.get("reward"),
        "tool_calls": graded.get("tool_calls"),
        "note": graded.get("note"),
    }
    if outcome != "correct":
        raise StageError(f"the reference program's answer through the white-box tools was graded {graded}")


def smoke_blackbox(stage: Stage, suite: Any, split: str, model: str) -> None:
    """One rollout of `model` through opencode and capture on the black-box server over HTTP, its
    agent chain through TRL's own conversion, audited token by token."""
    from dagent.envs.blackbox_session import BlackBoxSessionFactory

    with LocalEngineProcess(model) as engine:
        served = engine.model
        runtime = BlackBoxRuntime(
            suite,
            engine.url,
            model=served,
            timeout_s=900,
            opencode=OpencodeConfig(model=served, max_output_tokens=512),
        )
        with runtime, _Served(create_app(runtime)) as url:
            session = BlackBoxSessionFactory(url, split=split).create({"split": split, "index": 0})
            session.wait_for_completion(timeout_s=1200)
            payload = session.payload
    stage.command = f"POST {{black-box server}}/data_agent_blackbox/rollout (opencode, {model})"
    rollout = _PayloadRollout(payload)
    row = row_of(rollout, "opencode", 1024, lambda: ([0], [0]))
    stage.receipt = {
        "task": payload.get("task_id"),
        "outcome": payload.get("outcome"),
        "cause": payload.get("cause"),
        "reward": payload.get("reward"),
        "agent_turns": payload.get("agent_turns"),
        "calls": payload.get("turns"),
        "roles": payload.get("roles"),
        "gate": (payload.get("gate") or {}).get("tier"),
        "trained_tokens": row.trained_tokens,
        "exact_token_audit": row.audit,
        "samples_per_rollout": row.sequences,
    }
    if payload.get("outcome") == "ungraded" and payload.get("cause") not in (None,):
        raise StageError(f"the black-box smoke rollout was ungraded: {payload.get('cause')}")


def smoke_harbor(
    stage: Stage,
    suite: Any,
    out: Path,
    suite_args: list[str],
    command: Callable[[Stage, list[str], str], None],
) -> str | None:
    """The suite exported as a Harbor catalog (`command` runs `dagent export harbor`), the oracle through
    `harbor run` on dagent's provider; "skipped" where Harbor is not installed."""
    try:
        harbor = harbor_binary()
    except DagentError as e:
        stage.receipt = {
            "skipped": f"Harbor is not installed here ({e}); bash scripts/setup.sh --tests puts it in "
            ".venv-harbor (Python 3.12)"
        }
        return "skipped"
    catalog = out / "harbor"
    expected = min(3, len(suite.tasks("test")))
    command(
        stage,
        [
            sys.executable,
            "-m",
            "dagent.cli.app",
            "export",
            "harbor",
            "--split",
            "test",
            "--limit",
            str(expected),
            "--out",
            str(catalog),
            *suite_args,
        ],
        "export-harbor.log",
    )
    trials = run_harbor(catalog, out / "harbor-jobs", agent="oracle", concurrency=1)
    stage.command += (
        f" && {harbor} run -p {catalog} -a oracle -e dagent.harbor.provider:SandboxEnvironment -o {out / 'harbor-jobs'}"
    )
    stage.receipt = {
        "tasks": len(trials),
        "rewards": {t.task: t.reward for t in trials},
        "errors": [t.error for t in trials if t.error],
    }
    if len(trials) != expected or not all(t.correct for t in trials):
        raise StageError(f"the oracle through harbor run did not solve every task: {stage.receipt}")


class _Served:
    """An ASGI app on a free loopback port for the length of a `with`; its URL."""

    def __init__(self, app: Any) -> None:
        from dagent.envs.whitebox_server import SERVE_SETTINGS

        self.server = ThreadedServer(app, **SERVE_SETTINGS)

    def __enter__(self) -> str:
        return self.server.start().url

    def __exit__(self, *exc: Any) -> None:
        self.server.stop()


class _PayloadRollout:
    """A black-box server's rollout payload, read as `dagent.train.blackbox.rollouts.row_of` reads a Rollout."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload
        self.trajectory = type("T", (), {"roles": tuple(payload.get("roles") or ())})()
        for key in ("task_id", "outcome", "cause", "reward", "tool_calls"):
            setattr(self, key, payload.get(key))

    def trace_entries(self) -> list[dict[str, Any]]:
        return list(self.payload.get("trace_entries") or [])
