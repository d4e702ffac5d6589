"""The sbatch script (`dagent.launch.slurm`), rendered and then RUN by bash with stand-ins for `uv`
(an engine answering /health/ on the port it was given, a trainer recording its command line):
ports come from the job id (F36), the GPUs are split, the trainer reaches its engine in TRL's
server mode with arguments `dagent train whitebox` accepts. Not covered: a real cluster, vLLM and
TRL on GPUs."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from dagent.errors import ConfigError
from dagent.jobargs import parse
from dagent.launch.job import job_spec
from dagent.launch.slurm import sbatch_script
from dagent.train.whitebox.grpo import WhiteboxArgs, grpo_config

REQ = "dagent[gpu] @ git+https://github.com/o/dagent@" + "c" * 40
FAKE_UV = textwrap.dedent("""\
    #!/usr/bin/env python3
    import http.server, json, os, sys, threading
    args = sys.argv[1:]
    record = {"argv": args, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}
    with open(os.environ["UV_LOG"], "a") as f:
        f.write(json.dumps(record) + "\\n")
    if "vllm-serve" in args:
        port = int(args[args.index("--port") + 1])
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if self.path == "/health/" else 404); self.end_headers()
            def log_message(self, *a): pass
        http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def run(script: str, job_id: int, tmp_path: Path) -> list[dict]:
    import json

    bin_dir = tmp_path / f"bin{job_id}"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text(FAKE_UV)
    (bin_dir / "uv").chmod(0o755)
    log = tmp_path / f"uv{job_id}.log"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": str(job_id),
        "UV_LOG": str(log),
        "HF_TOKEN": "hf_x",
    }
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-1000:]
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_training_script_splits_gpus_and_derives_ports_from_the_job_id(tmp_path):
    spec = job_spec(
        "train-whitebox", ["--preset", "gpu", "--model", "OWNER/SFT"], secrets=["HF_TOKEN"], requirement=REQ
    )
    script = sbatch_script(spec, gpus=4, engine_gpus=1, model="OWNER/SFT", partition="gpu")
    assert "#SBATCH --gpus-per-node=4" in script and "#SBATCH --partition=gpu" in script and "hf_" not in script
    seen = {}
    for job_id in (1234, 1235):
        engine, trainer = run(script, job_id, tmp_path)
        port = 20000 + (job_id % 4000) * 10
        assert engine["cuda"] == "0" and trainer["cuda"] == "1,2,3"
        assert engine["argv"][engine["argv"].index("--port") + 1] == str(port)
        assert engine["argv"][:7] == ["run", "--python", spec.python, "--with", REQ, "trl", "vllm-serve"]
        argv = trainer["argv"]  # vLLM comes with dagent[gpu]: one environment, resolved in test_environments
        assert argv[5:10] == ["python", "-m", "dagent.cli.app", "train", "whitebox"]
        cli = argv[argv.index("whitebox") + 1 :]
        # 3 trainer processes: the job relaunches itself under accelerate (tests/launch/test_processes.py)
        assert parse(WhiteboxArgs, cli).processes == 3
        assert cli[cli.index("--vllm-server-url") + 1] == f"http://127.0.0.1:{port}"
        seen[job_id] = (port, cli[cli.index("--vllm-group-port") + 1])
        recipe = parse(WhiteboxArgs, cli).recipe()  # what `dagent train whitebox` makes of it
        config = grpo_config(recipe, tmp_path / "out", use_cpu=True, bf16=False)
        assert (config.vllm_mode, config.vllm_server_base_url, config.vllm_group_port) == (
            "server",
            f"http://127.0.0.1:{port}",
            port + 1,
        )
    assert seen[1234] != seen[1235]  # two jobs on one node: no shared port


def test_an_eval_script_and_the_refusals(tmp_path):
    spec = job_spec("eval", ["--agent", "oracle", "--split", "test"], requirement=REQ)
    (call,) = run(sbatch_script(spec, gpus=1), 7, tmp_path)
    assert call["argv"][5:] == ["python", "-m", "dagent.cli.app", "eval", "--agent", "oracle", "--split", "test"]
    train = job_spec("train-whitebox", [], requirement=REQ)
    with pytest.raises(ConfigError, match="at least one"):
        sbatch_script(train, gpus=2, engine_gpus=2, model="m")
    with pytest.raises(ConfigError, match="model="):
        sbatch_script(train, gpus=2, engine_gpus=1)
    with pytest.raises(ConfigError, match="from a checkout"):
        sbatch_script(job_spec("sft", [], requirement=REQ))
    with pytest.raises(ConfigError, match="not the GPU job environment"):  # no vLLM in it
        sbatch_script(job_spec("eval", [], requirement=REQ.replace("[gpu]", "[engine,env]")))
    missing = subprocess.run(
        ["bash", "-c", sbatch_script(job_spec("eval", [], secrets=["NOPE_TOKEN"], requirement=REQ))],
        env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "1"},
        capture_output=True,
        text=True,
    )
    assert missing.returncode != 0 and "export NOPE_TOKEN" in missing.stderr
