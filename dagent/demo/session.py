"""The demo's live state: one session per browser tab over a REAL white-box episode, the engines
and capture proxies the tabs share, and what a model did, as the trainer would receive it.

- A session is `dagent.tools.episode.open_episode` of the chosen task: its sandbox, staged tables,
  step budget, clipping and grading are the training environment's, so a call typed by hand gets
  exactly the text a model would (the tool surface is the one registry, F25).
- A model acts through `ToolLoopAgent.step` (the loop `--agent tools` evaluates and TRL's
  `environment_factory` trains) with its calls sent through a `CaptureServer` session: what the
  Model tab shows is the capture's record (the engine's ids, logprobs, loss mask), analysed by
  `analyse` and judged by `gate`, never a re-tokenisation.
- A model episode starts from a fresh sandbox: an episode a person already acted in is not one a
  model played (its step count and files are not the model's), so the first model step on such
  an episode opens a new one of the same task.
- Sessions are freed when a tab closes (`close`, wired to the page's unload), when idle for
  `idle_s`, or when the app stops; at most `max_sessions` run at once, past that a new tab is
  told to wait rather than starving the others' sandboxes.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from dagent import settings
from dagent.capture.server import CaptureServer
from dagent.core.outcome import EvalRecord, cause_head, outcome_of
from dagent.core.sampling import RECIPE_SAMPLING
from dagent.core.suite import TaskSuite
from dagent.core.task import Task
from dagent.engine.models import HUB_ID, model_dir
from dagent.engine.process import LocalEngineProcess, served_model
from dagent.errors import DagentError, EngineError
from dagent.eval.recordings import append_recording
from dagent.harness.base import AgentRun, sample_seed
from dagent.harness.toolloop import LoopAborted, LoopLimits, ToolLoopAgent, Transcript
from dagent.sandbox.base import SandboxBackend
from dagent.sandbox.local import LocalBackend
from dagent.suites.sources import load_tasks
from dagent.tools import ToolResult
from dagent.tools.episode import EpisodeConfig, EpisodeError, close_episode, open_episode, reword_submission
from dagent.trajectory.gate import gate

DEMO_COMMAND_TIMEOUT_S = 30.0  # a command that hangs is killed here and the tab keeps working
DEMO_IDLE_S = 900.0
MAX_SESSIONS = 16
MODELS = ("tiny-qwen3", "smollm2-135m")
DEMO_MODEL_VARIABLE = "DAGENT_DEMO_MODEL"


def default_model(environ: Any = None, runs: str | Path = "runs") -> str:
    """What the demo's model step starts with: $DAGENT_DEMO_MODEL (a checkpoint directory or a Hub
    model repo OWNER/NAME[@REVISION]: a deployment names its trained agent there), else the newest
    trained checkpoint under `runs/` (a `final/` model directory), else SmolLM2-135M-Instruct, a real
    model (the tiny Qwen3's random weights emit noise a newcomer would take for the agent)."""
    named = settings.read(DEMO_MODEL_VARIABLE, environ)
    if named:
        return named
    finals = [p.parent for p in Path(runs).glob("**/final/config.json")] if Path(runs).is_dir() else []
    if finals:
        return str(max(finals, key=lambda p: p.stat().st_mtime))
    return "smollm2-135m"


def model_note(model: str | None) -> str:
    """What the page says under the model picker: an untrained model acts like one, and how to get
    one that does the task."""
    fix = (
        "pick a trained checkpoint's `final/` directory (`dagent train whitebox --preset cpu --out "
        f"runs/grpo` makes one; the newest under `runs/` is the default), type a Hub model repo (OWNER/NAME), set "
        f"`{DEMO_MODEL_VARIABLE}` (a deployment's default), or give an engine URL"
    )
    if model == "smollm2-135m":
        return (
            "**SmolLM2-135M-Instruct, untrained here**: it mostly writes prose and rarely calls a tool, so "
            f"its episodes usually end without an answer. For an agent that works the task, {fix}."
        )
    if model == "tiny-qwen3":
        return (
            "**tiny Qwen3, random weights**: it emits noise (it shows the token chain and the masks, not "
            f"an agent). For an agent that works the task, {fix}."
        )
    if model and (Path(model) / "config.json").is_file():
        return f"**a local checkpoint**: `{model}`, served by the local engine."
    if model and hub_model_id(model):
        return (
            f"**a Hub checkpoint**: `{model}`, downloaded once into the Hugging Face cache and served by the "
            "local engine; whether it was trained, its model card says."
        )
    return "a model the engine at the URL serves" if model else fix[0].upper() + fix[1:] + "."


def local_model(model: str) -> bool:
    """A model the demo can start its own engine for: a named one, a model directory or a Hub model
    repo (downloaded by the engine, `dagent.engine.models.model_dir`)."""
    return model in MODELS or (Path(model) / "config.json").is_file() or hub_model_id(model)


def hub_model_id(model: str) -> bool:
    """OWNER/NAME[@REVISION] that is not a path on this machine."""
    return bool(HUB_ID.match(model)) and not Path(model).exists()


class DemoError(DagentError):
    """Something the person using the demo can fix; the message says how."""


@dataclass
class ModelRun:
    """A model's episode in progress: its conversation, its capture session, where it stopped."""

    agent: ToolLoopAgent
    transcript: Transcript
    capture: CaptureServer  # its calls go through it
    capture_session: str
    seed: int
    model: str  # the served model id
    decode: Callable[[int], str] | None
    stop: str | None = None  # why the loop ended; None while it can go on
    engine_note: str = ""
    started: float = field(default_factory=time.monotonic)

    @property
    def over(self) -> bool:
        return self.stop is not None


@dataclass
class DemoSession:
    key: str
    suite: TaskSuite
    source: str
    task: Task
    split: str
    index: int
    episode: Any  # dagent.tools.episode.Episode
    log: list[str] = field(default_factory=list)
    hand_calls: int = 0
    model: ModelRun | None = None
    model_runs: int = 0
    last_active: float = field(default_factory=time.monotonic)


class Engines:
    """The engines and capture proxies the demo started, shared by every tab, stopped together."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local: dict[str, Any] = {}  # model name -> LocalEngineProcess
        self._captures: dict[str, Any] = {}  # upstream URL -> CaptureServer
        self._decoders: dict[str, Callable[[int], str] | None] = {}

    def upstream(self, model: str, engine_url: str | None) -> tuple[str, str]:
        """(the engine's URL, its served model id): the URL given, or the local engine for `model`
        started on first use."""
        if engine_url:
            return engine_url.rstrip("/"), served_model(engine_url)
        if not local_model(model):
            raise DemoError(
                f"unknown model {model!r}: pick one of {', '.join(MODELS)}, a model directory (a "
                "checkpoint's final/), a Hub model repo OWNER/NAME, or give an engine URL"
            )
        with self._lock:
            engine = self._local.get(model)
            if engine is None or engine.proc is None or engine.proc.poll() is not None:
                engine = self._local[model] = LocalEngineProcess(model).start()
        return engine.url, served_model(engine.url)

    def capture(self, upstream: str, served: str) -> Any:
        with self._lock:
            server = self._captures.get(upstream)
            if server is None:
                server = self._captures[upstream] = CaptureServer(
                    upstream, sampling=RECIPE_SAMPLING, model=served
                ).start()
        return server

    def decoder(self, model: str, engine_url: str | None) -> Callable[[int], str] | None:
        """One id to its text with the model's own tokenizer (None for an engine given by URL: its
        tokenizer is not on this machine, and ids are shown instead)."""
        if engine_url:
            return None
        with self._lock:
            if model not in self._decoders:
                from transformers import AutoTokenizer

                tok = AutoTokenizer.from_pretrained(model_dir(model))
                self._decoders[model] = lambda tid, tok=tok: tok.decode([tid])
            return self._decoders[model]

    def close(self) -> None:
        with self._lock:
            for server in self._captures.values():
                server.stop()
            for engine in self._local.values():
                engine.stop()
            self._captures.clear()
            self._local.clear()


class Demo:
    """The app's state: suites by source, one sandbox backend, the shared engines, the sessions."""

    def __init__(
        self,
        backend: SandboxBackend | None = None,
        *,
        suite: TaskSuite | None = None,
        load: Callable[[str | None], TaskSuite] | None = None,
        config: EpisodeConfig | None = None,
        limits: LoopLimits = LoopLimits(),
        idle_s: float = DEMO_IDLE_S,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        if backend is None:
            backend = LocalBackend()
        self.backend = backend
        self.config = config or EpisodeConfig(command_timeout_s=DEMO_COMMAND_TIMEOUT_S, idle_timeout_s=idle_s)
        self.limits, self.idle_s, self.max_sessions = limits, idle_s, max_sessions
        self._load = load
        self._suites: dict[str, TaskSuite] = {"": suite} if suite is not None else {}
        self._sessions: dict[str, DemoSession] = {}
        self._lock = threading.Lock()
        self.engines = Engines()

    # -- suites and search --------------------------------------------------------------------
    def suite(self, source: str | None = None) -> TaskSuite:
        key = (source or "").strip()
        with self._lock:
            if key in self._suites:
                return self._suites[key]
        if self._load is None:
            self._load = load_tasks
        try:
            suite = self._load(key or None)
        except DagentError as e:
            raise DemoError(f"cannot load the suite {key or '(bundled)'}: {e}") from e
        with self._lock:
            self._suites[key] = suite
        return suite

    def search(
        self, source: str | None, split: str, tier: str, query: str, limit: int = 50
    ) -> list[tuple[str, int, str, str, str]]:
        """Tasks of `split` (and `tier`, unless "any") whose id contains `query` or whose
        instruction has every word of it: (split, index, task id, tier, instruction)."""
        suite = self.suite(source)
        if split not in suite.bases:
            raise DemoError(f"no split {split!r} in this suite: choose one of {', '.join(suite.bases)}")
        words = query.lower().split()
        out = []
        for i, task in enumerate(suite.tasks(split)):
            if tier not in ("", "any") and task.difficulty_tier != tier:
                continue
            text = task.instruction.lower()
            if words and query.strip().lower() not in task.task_id.lower() and not all(w in text for w in words):
                continue
            out.append((split, i, task.task_id, task.difficulty_tier, task.instruction))
            if len(out) >= limit:
                break
        return out

    def locate(self, source: str | None, split: str, ref: str) -> tuple[str, int]:
        """A task reference: `split#index`, a bare index into `split`, or a task id."""
        suite = self.suite(source)
        ref = (ref or "").strip()
        if not ref:
            raise DemoError("pick a task: search, then choose one of the matches (or type a task id)")
        if "#" in ref:
            split, _, idx = ref.rpartition("#")
        else:
            idx = ref
        if idx.isdigit():
            n = len(suite.tasks(split))
            if not 0 <= int(idx) < n:
                raise DemoError(f"index {idx} is outside split {split!r} (0..{n - 1})")
            return split, int(idx)
        try:
            found, index, _ = suite.find(ref)
        except DagentError as e:
            raise DemoError(f"unknown task id {ref!r}: search for it by words instead") from e
        return found, index

    # -- sessions -----------------------------------------------------------------------------
    def open(self, key: str, source: str | None, split: str, index: int) -> DemoSession:
        """A fresh episode of (split, index) for tab `key`, replacing the tab's previous one."""
        self.close(key)
        self.reap()
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                raise DemoError(
                    f"the demo already runs {self.max_sessions} sessions (one per open tab); "
                    "close another tab or try again in a few minutes"
                )
        suite = self.suite(source)
        task = suite.task_at(split, index)
        episode = self._episode(suite, task, split, index)
        session = DemoSession(key, suite, (source or "").strip(), task, split, index, episode)
        with self._lock:
            self._sessions[key] = session
        return session

    def _episode(self, suite: TaskSuite, task: Task, split: str, index: int) -> Any:
        return open_episode(
            task,
            suite.files_for(task),
            self.backend,
            split=split,
            index=index,
            config=self.config,
            episode_id=f"demo-{uuid.uuid4().hex[:12]}",
        )

    def get(self, key: str) -> DemoSession:
        with self._lock:
            session = self._sessions.get(key)
        if session is None:
            raise DemoError("no task is loaded in this tab (or it was idle and freed): load a task first")
        session.last_active = time.monotonic()
        return session

    def close(self, key: str) -> bool:
        with self._lock:
            session = self._sessions.pop(key, None)
        if session is None:
            return False
        self._end(session)
        return True

    def _end(self, session: DemoSession) -> None:
        self._close_model(session)
        try:
            close_episode(session.episode.episode_id)
        except EpisodeError:
            pass

    def reap(self) -> list[str]:
        """Free the sessions of tabs idle for longer than `idle_s`."""
        now = time.monotonic()
        with self._lock:
            stale = [k for k, s in self._sessions.items() if now - s.last_active > self.idle_s]
        for key in stale:
            self.close(key)
        return stale

    def sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    def shutdown(self) -> None:
        with self._lock:
            keys = list(self._sessions)
        for key in keys:
            self.close(key)
        self.engines.close()

    # -- acting by hand -----------------------------------------------------------------------
    def call(self, key: str, name: str, arguments: dict[str, Any]) -> tuple[ToolResult, int]:
        """One tool call by hand, through the episode (budget, validation, clipping): the result
        and the step it was counted as."""
        session = self.get(key)
        if session.model is not None:
            raise DemoError("a model is playing this episode: load the task again to act by hand")
        session.hand_calls += 1
        result = session.episode.call(name, arguments)
        return result, session.episode.tool_calls

    def submit(self, key: str, answer: str) -> Any:
        """Submit by hand: the episode's grade (an episode already graded is refused)."""
        session = self.get(key)
        if session.episode.done:
            raise DemoError("this episode already has its grade: load the task again to start over")
        session.episode.call("submit_solution", {"answer": answer})
        return session.episode.grade

    # -- a model acting -----------------------------------------------------------------------
    def model_step(self, key: str, model: str, engine_url: str | None = None, *, whole: bool = False) -> ModelRun:
        """One turn of the model (a generation and its tool calls), or every turn until the loop
        ends (`whole`). Engine failures end the run as data (`engine_note`), never an exception."""
        session = self.get(key)
        run = session.model
        if run is None or run.over:
            if session.hand_calls or session.episode.done or run is not None:
                self._close_model(session)
                close_episode(session.episode.episode_id)
                session.episode = self._episode(session.suite, session.task, session.split, session.index)
                session.hand_calls, session.log = 0, []
            run = session.model = self._start_model(session, model, engine_url.strip() if engine_url else None)
        call = session.episode.call
        while not run.over:
            try:
                run.stop = run.agent.step(run.transcript, run.seed, call)
            except EngineError as e:
                run.stop, run.engine_note = "engine_error", str(e)
            except LoopAborted:
                run.stop = "aborted"
            if not whole:
                break
        if run.over and not session.episode.done:
            session.episode.finish()  # no submission: graded as the trainer would grade it
        session.last_active = time.monotonic()
        return run

    def _start_model(self, session: DemoSession, model: str, engine_url: str | None) -> ModelRun:
        try:
            upstream, served = self.engines.upstream(model, engine_url)
            capture = self.engines.capture(upstream, served)
            decode = self.engines.decoder(model, engine_url)
        except EngineError as e:
            raise DemoError(f"the engine is not available: {e}") from e
        cap = capture.open_session(metadata={"demo": session.key, "task_id": session.task.task_id})
        client = httpx.Client(timeout=600.0, headers={"Authorization": f"Bearer {cap.api_key}"})
        agent = ToolLoopAgent(
            f"http://{capture.host}:{capture.port}", served, config=self.config, limits=self.limits, client=client
        )
        session.model_runs += 1
        seed = sample_seed(session.task.task_id, session.model_runs - 1)
        return ModelRun(
            agent, Transcript(agent.conversation(session.task)), capture, cap.session_id, seed, served, decode
        )

    def _close_model(self, session: DemoSession) -> None:
        run, session.model = session.model, None
        if run is not None:
            try:
                run.capture.close_session(run.capture_session)
            except DagentError:
                pass

    def analysis(self, key: str) -> tuple[Any, list[Any], Any]:
        """The model run's trajectory, findings (the proxy's, then the analysis') and gate verdict."""
        run = self.get(key).model
        if run is None:
            raise DemoError("no model has acted in this tab yet: let the model take a step first")
        trajectory = run.capture.trajectory(run.capture_session)
        return trajectory, run.capture.findings(run.capture_session), gate(trajectory)

    def record(self, key: str) -> EvalRecord:
        """The model episode as an evaluation record (what `dagent eval --agent tools` writes)."""
        session = self.get(key)
        run, episode = session.model, session.episode
        if run is None or not run.over:
            raise DemoError("the model's episode is not over yet: run it to the end first")
        grade = episode.grade
        cause = None
        if grade.correct is None:
            cause = "engine_unreachable" if run.engine_note else cause_head(grade.note)
        return EvalRecord(
            task_id=session.task.task_id,
            split=session.split,
            index=session.index,
            difficulty_tier=session.task.difficulty_tier,
            agent="tools",
            model=run.model,
            sample=session.model_runs - 1,
            outcome=outcome_of(grade),
            reward=episode.reward,
            correct=grade.correct,
            method=grade.method,
            note=grade.note,
            cause=cause,
            answer=episode.answer,
            model_calls=run.transcript.model_calls,
            tool_calls=episode.tool_calls,
            duration_s=round(time.monotonic() - run.started, 3),
            cutoff=AgentRun(metadata={"step_capped": episode.refused_calls > 0, "stop": run.stop}).cutoff,
        )

    def save(self, key: str, out_dir: Path) -> Path:
        """Append the finished model episode and its capture log to a recording directory."""
        record = self.record(key)
        trajectory, _, _ = self.analysis(key)
        return append_recording(Path(out_dir), record, trajectory)

    def instructions(self, key: str) -> tuple[str, str]:
        task = self.get(key).task
        return task.instruction, reword_submission(task.instruction)
