"""Black-box GRPO's async (GPU) path, checked where it can be on a CPU: the AsyncGRPOConfig built
and asserted field by field, each knob that does not fit agent rollouts refused with its reason
(F38), the engine preflight against planted engines over real HTTP (F37 dev mode and flags, F36
identity, F06 dtype), ports from the job id (F36), the server probing its engine from its own host,
and what TRL pickles into its spawned child importing by name there. Not covered here: the launch
itself (vLLM on a GPU, NCCL weight transfer, AsyncGRPOTrainer's CUDA attention)."""

from __future__ import annotations

import functools
import multiprocessing
import pickle
from dataclasses import replace

import pytest

from dagent.errors import ConfigError
from dagent.launch.ports import JobPorts, job_ports
from dagent.recipes import BlackboxRecipe
from dagent.train.blackbox.async_engine import EnginePreflightError, check_dtype, preflight_engine, probe_from_server
from dagent.train.blackbox.async_trainer import check_config, config_kwargs
from dagent.train.preflight import PreflightError
from tests.factories import LiveServer

RECIPE = BlackboxRecipe.gpu()
GOOD = dict(agent_timeout_s=600.0, capture_clamp=8192, engine_max_model_len=65_536, turns_per_rollout=8.5)


def test_the_async_config_is_the_reference_runs_field_by_field():
    pytest.importorskip("trl")
    from trl.experimental.async_grpo import AsyncGRPOConfig

    kwargs = config_kwargs(RECIPE, "/tmp/out", engine_url="http://127.0.0.1:20420", run_name="bb")
    config = AsyncGRPOConfig(**kwargs, use_cpu=True)  # use_cpu only so that it builds on this machine
    expected = dict(
        token_budget=40_960,
        heartbeat_stale_after_s=900.0,
        max_completion_length=16_384,
        max_inflight_tasks=32,
        dtype="bfloat16",
        num_generations=8,
        learning_rate=1e-6,
        temperature=0.8,
        top_p=1.0,
        top_k=0,
        max_steps=400,
        save_steps=20,
        save_total_limit=3,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=4,
        max_tool_calling_iterations=17,
        fork_threshold_tokens=0,
        vllm_server_base_url="http://127.0.0.1:20420",
        run_name="bb",
        output_dir="/tmp/out",
        logging_steps=1,
    )
    assert {k: getattr(config, k) for k in expected} == expected
    assert str(config.save_strategy) in ("steps", "SaveStrategy.STEPS")
    assert [c.name for c in check_config(kwargs, **GOOD, engine_dtype="bfloat16")] == [
        "token_budget",
        "heartbeat",
        "completion",
        "inflight",
        "dtype",
    ]


@pytest.mark.failure_mode("F38")
@pytest.mark.parametrize(
    "knob, value, code",
    [
        ("token_budget", None, "token_budget_at_max_model_len"),
        ("token_budget", 131_072, "token_budget_at_max_model_len"),
        ("heartbeat_stale_after_s", 300.0, "heartbeat_below_agent_timeout"),
        ("max_completion_length", 2048, "completion_below_clamp"),
        ("max_inflight_tasks", 64, "inflight_by_clients"),
    ],
)
def test_a_default_that_does_not_fit_agent_rollouts_is_refused_with_its_reason(knob, value, code):
    kwargs = {**config_kwargs(RECIPE, "/tmp/out", engine_url="http://e"), knob: value}
    turns = 16.0 if knob == "max_inflight_tasks" else GOOD["turns_per_rollout"]
    with pytest.raises(PreflightError, match=f"{code}.*F38"):
        check_config(kwargs, **{**GOOD, "turns_per_rollout": turns})


@pytest.mark.failure_mode("F06")
def test_a_trainer_dtype_other_than_the_engines_is_refused():
    assert check_dtype("bfloat16", "torch.bfloat16").ok
    with pytest.raises(PreflightError, match="dtype_mismatch.*F06"):
        check_dtype("float32", "bfloat16")
    with pytest.raises(PreflightError, match="dtype_mismatch"):
        check_config(
            config_kwargs(RECIPE, "/tmp/o", engine_url="http://e", dtype="float32"), **GOOD, engine_dtype="bfloat16"
        )


def engine_app(
    *, dev_mode=True, transfer=True, logprobs="processed_logprobs", served=("OWNER/SFT",), dtype="torch.bfloat16"
):
    """A planted engine: vLLM's /server_info (behind dev mode) and /v1/models, configurable."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.get("/server_info")
    def server_info():
        if not dev_mode:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return {
            "vllm_config": {
                "weight_transfer_config": {"backend": "nccl"} if transfer else None,
                "model_config": {"logprobs_mode": logprobs, "dtype": dtype},
            }
        }

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": m, "object": "model"} for m in served]}

    return app


@pytest.mark.failure_mode("F37")
@pytest.mark.failure_mode("F36")
@pytest.mark.failure_mode("F06")
@pytest.mark.parametrize(
    "planted, code",
    [
        ({"dev_mode": False}, "dev_mode_off"),
        ({"transfer": False}, "no_weight_transfer"),
        ({"logprobs": "raw_logprobs"}, "raw_logprobs"),
        ({"served": ("OTHER-JOB/MODEL",)}, "wrong_engine"),
        ({"dtype": "torch.float32"}, "dtype_mismatch"),
    ],
)
def test_the_engine_preflight_names_what_is_wrong_with_the_engine_on_this_jobs_port(planted, code):
    server = LiveServer(engine_app(**planted))
    try:
        with pytest.raises(PreflightError, match=code):
            preflight_engine(server.url, "OWNER/SFT", "bfloat16")
    finally:
        server.stop()
    server = LiveServer(engine_app())
    try:
        assert [c.name for c in preflight_engine(server.url, "OWNER/SFT", "bfloat16")] == [
            "dev_mode",
            "weight_transfer",
            "logprobs_mode",
            "identity",
            "dtype",
        ]
    finally:
        server.stop()


@pytest.mark.failure_mode("F36")
def test_ports_derive_from_the_job_id_and_a_job_without_one_is_refused():
    a, b = JobPorts.for_job(76499), JobPorts.for_job(76501)
    assert len({a.engine, a.group, a.env, a.capture}) == 4 and a.engine != b.engine
    assert a.engine == 20000 + (76499 % 4000) * 10 and a.capture < 32768
    assert job_ports({"SLURM_JOB_ID": "76499"}) == a and job_ports({"DAGENT_JOB_ID": "job-76501"}) == b
    with pytest.raises(ConfigError, match="F36"):
        job_ports({})


def test_the_server_probes_its_engine_from_its_own_host(suite):
    from dagent.envs.blackbox_server import create_app
    from dagent.runtime.blackbox import BlackBoxRuntime

    engine = LiveServer(engine_app(served=("OWNER/SFT",)))
    servers = []
    try:
        for engine_url in (engine.url, "http://127.0.0.1:9"):  # the job's engine; one nobody serves
            servers.append(LiveServer(create_app(BlackBoxRuntime(suite, engine_url, model="OWNER/SFT"))))
        assert probe_from_server(servers[0].url, "OWNER/SFT").ok
        assert probe_from_server(servers[0].url, "OWNER/SFT", engine.url + "/v1/").ok  # --engine-url: that engine
        with pytest.raises(EnginePreflightError, match="engine_url_mismatch: .* forwards to http://127.0.0.1:9"):
            probe_from_server(servers[1].url, "OWNER/SFT", engine.url)  # --engine-url once read and dropped (F59)
        with pytest.raises(EnginePreflightError, match="wrong_engine_from_server"):
            probe_from_server(servers[0].url, "OWNER/OTHER")
        with pytest.raises(EnginePreflightError, match="engine_unreachable_from_server"):
            probe_from_server(servers[1].url, "OWNER/SFT")
    finally:
        for s in servers:
            s.stop()
        engine.stop()


def _child(blob: bytes, out) -> None:
    factory, reward = pickle.loads(blob)
    out.put(
        (
            factory.func.__module__,
            factory.func.__qualname__,
            reward.__module__,
            reward.__qualname__,
            reward([], [], env_reward=[None, 1.0]),
        )
    )


def test_what_trl_pickles_into_its_spawned_child_imports_there_by_name():
    """TRL's HarnessRolloutWorker runs the factory and reward functions in a SPAWNED child: a
    closure or lambda fails there only after sandboxes are paid for. Ours unpickle in a fresh
    interpreter."""
    from dagent.train.blackbox.async_trainer import RoutedSessions
    from dagent.train.blackbox.rollouts import env_reward

    blob = pickle.dumps(
        (functools.partial(RoutedSessions, {"opencode": "http://127.0.0.1:1"}, split="train"), env_reward)
    )
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_child, args=(blob, out))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    assert out.get(timeout=5) == (
        "dagent.train.blackbox.async_trainer",
        "RoutedSessions",
        "dagent.train.blackbox.rollouts",
        "env_reward",
        [None, 1.0],
    )
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(lambda prompts, completions, **kw: [0.0])


def harness_loop(recipe: BlackboxRecipe, *, lossless_capture: bool, factory=None):
    """TRL's own `_HarnessRolloutLoop` (what the worker builds in its spawned child) from the
    launcher's config and worker arguments: the object that decides, not the config (F46). The
    worker itself needs vLLM to construct; the loop does not."""
    import multiprocessing as mp

    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl.experimental.async_grpo import AsyncGRPOConfig
    from trl.experimental.async_grpo.openenv_harness import _HarnessRolloutLoop

    from dagent.engine.models import tiny_qwen3
    from dagent.train.blackbox.async_trainer import worker_kwargs

    class Sessions:
        def __init__(self, sampling=None) -> None:
            self.sampling = sampling

    config = AsyncGRPOConfig(**config_kwargs(recipe, "/tmp/out", engine_url="http://127.0.0.1:1"), use_cpu=True)
    kwargs = worker_kwargs(
        config,
        "m",
        Dataset.from_list([{"prompt": [{"role": "user", "content": "x"}]}]),
        AutoTokenizer.from_pretrained(str(tiny_qwen3())),
        factory or Sessions,
        lossless_capture=lossless_capture,
    )
    ctx = mp.get_context("spawn")
    kwargs.update(
        dataset_start_index=0,
        rollout_buffer=ctx.Queue(),
        model_version_value=ctx.Value("i", 0),
        heartbeat_value=ctx.Value("d", 0.0),
        failed_event=ctx.Event(),
        exception_info_queue=ctx.Queue(),
        metrics_queue=ctx.Queue(),
    )
    return _HarnessRolloutLoop(**kwargs)


@pytest.mark.failure_mode("F46")
def test_the_recipes_fork_policy_and_step_cap_are_what_the_rollout_loop_uses():
    recipe = BlackboxRecipe.gpu()
    assert recipe.agent_steps == 17 and BlackboxRecipe.gpu_steps25().agent_steps == 25  # the reference run's cap
    loop = harness_loop(recipe, lossless_capture=recipe.lossless_capture)
    # the recipe's choice (lossless, measured: every sampled token trained), on the object, not the config
    assert recipe.lossless_capture and loop._fork_threshold_tokens == recipe.worker_fork_threshold == 0
    assert loop._limits.max_turns == 17 and loop._factory.sampling["temperature"] == 0.8
    # the alternative keeps its threshold when lossless capture is off ...
    realigning = replace(recipe, lossless_capture=False)
    assert harness_loop(realigning, lossless_capture=False)._fork_threshold_tokens == 1024
    # ... and the planted fault: TRL's default lossless_capture=True silently discards a config's 1024
    assert harness_loop(realigning, lossless_capture=True)._fork_threshold_tokens == 0


@pytest.mark.failure_mode("F40")
def test_each_group_goes_to_one_harness_whole():
    from dagent.train.blackbox.async_trainer import RoutedSessions
    from dagent.train.routing import route

    sessions = RoutedSessions({"opencode": "http://127.0.0.1:1", "pi": "http://127.0.0.1:2"}, split="train")
    seen: list[tuple[str, int]] = []

    class Record:
        def __init__(self, name: str) -> None:
            self.name = name

        def create(self, task, seed=None, episode_id=None):
            seen.append((self.name, seed))

    sessions.factories = {name: Record(name) for name in sessions.names}
    for group in range(4):
        for _ in range(3):  # a group's rollouts
            sessions.create({"split": "train", "index": group}, seed=group)
    assert seen == [(route(g, ("opencode", "pi")), g) for g in range(4) for _ in range(3)]
    assert {name for name, _ in seen} == {"opencode", "pi"}


def test_every_option_reaches_the_run_or_is_refused(suite_dir, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from dagent.jobargs import parse
    from dagent.train.blackbox.args import BlackboxArgs
    from dagent.train.blackbox.plan import plan_run
    from dagent.train.blackbox.trainer import ASYNC_REFUSED, train_blackbox
    from dagent.train.budget import TimeBudget
    from dagent.train.health import HealthWatch
    from dagent.train.hub_checkpoints import CheckpointPusher
    from dagent.train.retention import LatestOptimizerOnly
    from dagent.train.stamp import ProvenanceStamp

    monkeypatch.setenv("DAGENT_JOB_ID", "4242")

    def args(*more: str) -> BlackboxArgs:
        return parse(
            BlackboxArgs,
            [
                "--mode",
                "async",
                "--preset",
                "gpu",
                "--suite",
                str(suite_dir),
                "--split",
                "train",
                "--out",
                str(tmp_path),
                "--dry-run",
                *more,
            ],
        )

    lines: list[str] = []
    kwargs = train_blackbox(args("--harness", "opencode,pi"), echo=lines.append)
    assert kwargs["max_tool_calling_iterations"] == 17
    assert any("opencode, pi, routed per group" in line and "lossless_capture=True" in line for line in lines)

    def replicas(*more: str) -> str:  # the engine's data-parallel size, as the job prints the command
        echoed: list[str] = []
        train_blackbox(args(*more), echo=echoed.append)
        (engine,) = [line.split() for line in echoed if line.startswith("engine: ")]
        return engine[engine.index("--data-parallel-size") + 1]

    # one vLLM replica per engine GPU, derived from --engine-devices (h200x4: 0,1,2 serve, 3 trains)
    assert (replicas(), replicas("--engine-devices", "0,1,2"), replicas("--engine-devices", "0, 2")) == ("1", "3", "2")
    with pytest.raises(ConfigError, match="one harness"):
        train_blackbox(args("--harness", "opencode,pi", "--env-url", "http://space"), echo=lines.append)
    with pytest.raises(PreflightError, match="zero_variance_groups"):  # --base-pass1 reaches the F39 check
        train_blackbox(args("--base-pass1", "0.99"), echo=lines.append)
    train_blackbox(args("--base-pass1", "0.99", "--force"), echo=lines.append)
    with pytest.raises(ConfigError, match="unknown harness 'codex'"):
        args("--harness", "codex").harnesses()

    a = replace(args("--push-to-hub", "me/run", "--max-minutes", "30"), dry_run=False)
    calls = plan_run(a, ASYNC_REFUSED).callbacks  # what the launcher hands the trainer
    # every path's callbacks (dagent.train.assembly): the optimizer-state retention the async path once lacked
    assert [type(c) for c in calls.listed()] == [
        HealthWatch,
        ProvenanceStamp,
        CheckpointPusher,
        TimeBudget,
        LatestOptimizerOnly,
    ]
    assert calls.stamp.record["recipe"]["mode"] == "black-box async" and calls.pusher.repo_id == "me/run"
    assert calls.budget.minutes == 30
