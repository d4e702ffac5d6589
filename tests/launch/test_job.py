"""The jobs: the `hf jobs uv run` lines of README and docs/ each name a script of jobs/ whose PEP 723 header names
NO dagent (PyPI's `dagent` is another package) and install this project pinned at a full commit
through `--with`; their arguments parse with the job's own parser and huggingface_hub's CLI resolves
them (`--dry-run`, offline). `dagent jobs run --dry-run` prints such a line, and hf's own dry run of
it shows the same job spec. Not covered: a real job on the Hub (needs the network and a token); the
submission and logs calls are checked against an injected HfApi bound to the real signatures.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dagent.launch.job import PINNED

ROOT = Path(__file__).resolve().parents[2]


HEAD = (
    subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    or "0" * 40
)


def readme_job_lines() -> list[list[str]]:
    """Every `hf jobs uv run` line of the README and the docs pages."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "\n".join(p.read_text() for p in pages).replace("\\\n", " ").replace("$(git rev-parse HEAD)", HEAD)
    return [
        shlex.split(line.strip().split("  #")[0])
        for line in text.splitlines()
        if line.strip().startswith("hf jobs uv run")
    ]


def split_line(argv: list[str]) -> tuple[list[str], Path, list[str]]:
    i = next(i for i, a in enumerate(argv) if a.endswith(".py"))
    assert argv[i - 1] == "--", "the script must follow `--`, or hf takes same-named job arguments as its own"
    return argv[4 : i - 1], ROOT / argv[i], argv[i + 1 :]


def pep723(script: Path) -> dict:
    block = re.search(r"^# /// script\n((?:#.*\n)+?)# ///$", script.read_text(), re.M)
    assert block, f"{script} has no PEP 723 block"
    return tomllib.loads(
        "".join(line[2:] if line.startswith("# ") else line[1:] for line in block.group(1).splitlines(True))
    )


def test_readme_has_the_eval_and_training_job_lines():
    scripts = {split_line(a)[1].name for a in readme_job_lines()}
    assert {"eval.py", "train_whitebox.py", "train_blackbox.py"} <= scripts


@pytest.mark.parametrize("argv", readme_job_lines(), ids=lambda a: split_line(a)[1].name)
def test_each_job_line_resolves_and_parses(argv):
    options, script, args = split_line(argv)
    header = pep723(script)
    assert header["requires-python"] and not any(d.lower().startswith("dagent") for d in header["dependencies"])
    withs = [options[i + 1] for i, o in enumerate(options) if o == "--with"]
    assert len(withs) == 1 and PINNED.match(withs[0]), withs  # this project, at a full commit
    if script.name == "train_whitebox.py":
        from dagent.jobargs import parse
        from dagent.train.whitebox.grpo import WhiteboxArgs

        recipe = parse(WhiteboxArgs, args).recipe()  # the published recipe, field by field
        assert (
            recipe.split,
            recipe.num_generations,
            recipe.beta,
            recipe.learning_rate,
            recipe.warmup_steps,
            recipe.per_device_train_batch_size,
            recipe.gradient_accumulation_steps,
            recipe.max_completion_length,
            recipe.output_chars,
            recipe.use_vllm,
            recipe.vllm_gpu_memory_utilization,
        ) == ("train:easy", 8, 0.04, 1e-6, 10, 2, 4, 3072, 1200, True, 0.3)
    elif script.name == "train_blackbox.py":
        from dagent.jobargs import parse
        from dagent.train.blackbox.args import BlackboxArgs

        parsed = parse(BlackboxArgs, args)
        recipe = parsed.recipe()  # the reference run's recipe (the config itself: tests/train/test_blackbox_async.py)
        assert parsed.mode == "async" and set(parsed.harnesses()) <= {"opencode", "pi"}
        assert (
            recipe.split,
            recipe.num_generations,
            recipe.learning_rate,
            recipe.agent_steps,
            recipe.env_max_steps,
            recipe.max_output_tokens,
        ) == ("train:easy", 8, 1e-6, 17, 30, 8192)  # the reference run's hard cap
    elif script.name == "eval.py":
        import typer

        from dagent.cli.app import app

        ctx = typer.main.get_command(app).commands["eval"].make_context("eval", list(args))
        assert ctx.params["agent"] in ("oracle", "tools", "opencode") and ctx.params["engine"] == "vllm"
    hf = Path(sys.executable).parent / "hf"
    out = subprocess.run(
        [str(hf), "jobs", "uv", "run", "--dry-run", *options, "--", str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "(dry run) Job not submitted." in out.stdout, out.stderr[-500:]


def test_the_gpu_recipe_samples_like_the_evaluation():
    from dagent.core.sampling import RECIPE_SAMPLING
    from dagent.recipes import WhiteboxRecipe
    from dagent.train.whitebox.grpo import grpo_config

    config = grpo_config(WhiteboxRecipe.gpu(use_vllm=False, bf16=False, use_cpu=True), "/tmp/x")
    assert (
        (config.temperature, config.top_p, config.top_k)
        == (0.8, 1.0, 0)
        == tuple(RECIPE_SAMPLING.as_request().values())
    )
    assert config.save_only_model is False and config.max_completion_length == 3072


@pytest.mark.parametrize("script", sorted((ROOT / "jobs").glob("*.py")), ids=lambda p: p.name)
def test_no_job_script_names_a_bare_dagent(script):
    deps = pep723(script)["dependencies"]
    assert not [d for d in deps if d.lower().startswith("dagent") and not PINNED.match(d)], deps


def _hf_dry_run(argv: list[str]) -> dict[str, str]:
    """huggingface_hub's own `hf jobs uv run --dry-run`, read back into {field: value}."""
    hf = Path(sys.executable).parent / "hf"
    out = subprocess.run(
        [str(hf), *argv[1:4], "--dry-run", *argv[4:]], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0 and "(dry run) Job not submitted." in out.stdout, out.stderr[-500:]
    fields, key = {}, None
    for line in out.stdout.splitlines()[1:]:
        if line.startswith("  ") and not line.startswith("   "):
            key, _, value = line.strip().partition(" ")
            fields[key] = value.strip()
        elif line.startswith("   ") and key:
            fields[key] += "\n" + line.strip()
    return fields


def test_the_dry_run_line_is_the_job_spec_hf_itself_reads(monkeypatch):
    from typer.testing import CliRunner

    from dagent.cli.app import app
    from dagent.launch.job import job_spec

    sha = "0123456789abcdef0123456789abcdef01234567"
    r = CliRunner().invoke(
        app,
        [
            "jobs",
            "run",
            "--flavor",
            "l4x1",
            "--job-timeout",
            "2h",
            "--secret",
            "HF_TOKEN",
            "--env",
            "DAGENT_LOG=1",
            "--project-url",
            "https://github.com/o/dagent",
            "--revision",
            sha,
            "--dry-run",
            "eval",
            "--agent",
            "oracle",
            "--split",
            "test",
            "--timeout",
            "60",
        ],
    )
    assert r.exit_code == 0, r.output
    line = r.output.strip()
    spec = job_spec(
        "eval",
        ["--agent", "oracle", "--split", "test", "--timeout", "60"],
        flavor="l4x1",
        timeout="2h",
        env={"DAGENT_LOG": "1"},
        secrets=["HF_TOKEN"],
        project_url="https://github.com/o/dagent",
        revision=sha,
    )
    assert shlex.split(line) == spec.hf_command()  # the job's own --timeout stays the job's
    seen = _hf_dry_run(shlex.split(line))
    assert seen["script"] == "jobs/eval.py" and seen["args"] == "--agent oracle --split test --timeout 60"
    assert seen["with"] == f"dagent[gpu] @ git+https://github.com/o/dagent@{sha}"  # l4x1: the GPU environment
    assert (seen["flavor"], seen["timeout"], seen["env"]) == ("l4x1", "2h", "DAGENT_LOG=1")
    assert seen["secrets"].startswith("HF_TOKEN=") and "hf_" not in seen["secrets"]
    assert {"app=dagent", "job=eval", f"revision={sha[:12]}"} <= set(seen["labels"].split("\n"))


def test_a_dirty_tree_a_moving_ref_or_no_url_is_refused(monkeypatch):
    from dagent.errors import ConfigError
    from dagent.launch import job

    with pytest.raises(ConfigError, match="full 40-character commit"):
        job.project_requirement("https://github.com/o/dagent", "main")
    monkeypatch.delenv("DAGENT_PROJECT_URL", raising=False)
    monkeypatch.setattr(job, "_git", lambda *a: None)
    with pytest.raises(ConfigError, match="--project-url"):
        job.project_requirement()
    monkeypatch.setattr(job, "_git", lambda *a: {"rev-parse": "a" * 40, "status": " M dagent/x.py"}.get(a[0], "u"))
    with pytest.raises(ConfigError, match="uncommitted changes"):
        job.project_requirement("https://github.com/o/dagent")
    with pytest.raises(ConfigError, match="does not pin dagent"):
        job.job_spec("eval", requirement="dagent[all]")


def test_submit_and_logs_call_huggingface_hub_with_secrets_by_name():
    import inspect

    from huggingface_hub import HfApi

    from dagent.errors import ConfigError
    from dagent.launch.job import job_spec, logs, submit

    calls = []

    class Api:
        def run_uv_job(self, *a, **kw):
            inspect.signature(HfApi.run_uv_job).bind(self, *a, **kw)
            calls.append((a, kw))
            return type("JobInfo", (), {"id": "job-1", "url": "https://huggingface.co/jobs/me/job-1"})()

        def fetch_job_logs(self, **kw):
            inspect.signature(HfApi.fetch_job_logs).bind(self, **kw)
            calls.append(((), kw))
            return iter(["line 1", "line 2"])

    spec = job_spec(
        "train-whitebox",
        ["--preset", "gpu"],
        flavor="a100-large",
        secrets=["HF_TOKEN"],
        requirement="dagent[all] @ git+https://github.com/o/dagent@" + "b" * 40,
    )
    with pytest.raises(ConfigError, match="HF_TOKEN not set"):
        submit(spec, api=Api(), environ={})
    info = submit(spec, api=Api(), environ={"HF_TOKEN": "hf_secret"})
    (script,), kw = calls[0]  # the pinned commit's own script, fetched by uv: no local copy uploaded
    assert (
        info.id == "job-1" and script == f"https://raw.githubusercontent.com/o/dagent/{'b' * 40}/jobs/train_whitebox.py"
    )
    assert kw["dependencies"] == [spec.requirement] and kw["secrets"] == {"HF_TOKEN": "hf_secret"}
    assert kw["script_args"] == ["--preset", "gpu"] and kw["flavor"] == "a100-large" and kw["python"] == spec.python
    assert "hf_secret" not in spec.hf_line()  # names only, anywhere a line is printed
    assert list(logs("job-1", follow=True, api=Api())) == ["line 1", "line 2"]
    assert calls[-1][1] == {"job_id": "job-1", "follow": True, "namespace": None}


def test_the_to_the_hub_commands_run_offline_as_written():
    """docs/jobs.md's "From here to the Hub" lines, each run through the CLI as written (the revision
    pinned to this checkout's commit, so a dirty working tree does not refuse them)."""
    import re
    import shlex
    import subprocess

    from typer.testing import CliRunner

    from dagent.cli.app import app

    section = (ROOT / "docs" / "jobs.md").read_text().split("\n## ", 1)[0]
    lines = [line for line in re.search(r"```bash\n(.*?)```", section, re.S).group(1).splitlines() if line.strip()]
    assert len(lines) >= 4 and all(line.startswith(".venv/bin/dagent ") for line in lines)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    for line in lines:
        argv = shlex.split(line)[1:]
        if argv[0] == "jobs" and head:
            argv[2:2] = ["--revision", head]
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 0, (line, r.output, r.exception)
        out = r.stdout  # what the command prints; progress (a first suite build) goes to stderr
        if argv[:2] == ["jobs", "run"]:
            assert (
                out.startswith("hf jobs uv run ")
                and " -- jobs/" in out
                and "git+https://github.com/OWNER/dagent@" in out
            )
        elif argv[:2] == ["jobs", "slurm"] and "train-blackbox" in argv:  # the job starts its own engine
            assert out.startswith("#!/bin/bash") and "train blackbox --mode async" in out and "SLURM_JOB_ID" in out
        elif argv[:2] == ["jobs", "slurm"]:
            assert out.startswith("#!/bin/bash") and "trl vllm-serve" in out
        elif argv[:2] == ["suite", "push"]:
            assert out.startswith("push ") and "tasks to datasets/OWNER/data-agent-suite" in out
        elif argv[:2] == ["space", "deploy"]:
            assert out.startswith("space OWNER/") and "secrets (by name" in out and "hf.space/health" in out
        elif argv[:2] == ["space", "duplicate"]:
            assert out.startswith("duplicate spaces/OWNER/data-agent-blackbox -> spaces/ME/")
        elif argv[:3] == ["sandbox", "image", "hf"]:
            assert out == (ROOT / "spaces/sandbox/Dockerfile").read_text()  # the image it would publish
        else:
            assert out.startswith("# E2B template") and "FROM python:" in out


@pytest.mark.failure_mode("F22")
def test_a_job_is_submitted_inspected_and_its_logs_read_against_a_local_endpoint():
    """run_uv_job with the pinned commit's script URL is a plain run_job request (no Xet upload): the
    local endpoint records exactly what huggingface_hub 2.4 sends. Not covered: the real Hub's job
    scheduler and its encryption of secret values."""
    from huggingface_hub import HfApi

    from dagent.launch.job import job_spec, logs, submit
    from tests.fake_hub import FakeHub

    spec = job_spec(
        "eval",
        ["--agent", "tools", "--timeout", "60"],
        flavor="l4x1",
        secrets=["HF_TOKEN"],
        requirement="dagent[all] @ git+https://github.com/o/dagent@" + "c" * 40,
    )
    with FakeHub() as hub:
        api = HfApi(endpoint=hub.url, token=hub.token)
        info = submit(spec, api=api, environ={"HF_TOKEN": "hf_value"})
        (job,) = hub.jobs.values()
        sent = job["spec"]
        assert sent["command"] == [
            "uv",
            "run",
            "--with",
            spec.requirement,
            "--python",
            spec.python,
            f"https://raw.githubusercontent.com/o/dagent/{'c' * 40}/jobs/eval.py",
            "--agent",
            "tools",
            "--timeout",
            "60",
        ]
        assert (
            sent["flavor"] == "l4x1"
            and {"app": "dagent", "job": "eval", "revision": "c" * 12}.items() <= sent["labels"].items()
        )
        assert sent["secrets"] == {"HF_TOKEN": "hf_value"} and "hf_value" not in str(sent["command"])
        assert info.id == job["id"] and info.secrets == ["HF_TOKEN"]  # names come back, never values
        assert api.inspect_job(job_id=info.id).status.stage == "COMPLETED"
        assert list(logs(info.id, api=api))[-1] == "done"


def test_bucket_listing_goes_through_the_endpoint_and_staging_refuses_an_empty_prefix(tmp_path):
    from huggingface_hub import HfApi

    from dagent.errors import StagingError
    from dagent.sandbox.staging import fetch_bucket
    from tests.fake_hub import FakeHub

    with FakeHub() as hub:
        hub.buckets["fake-user/tables"] = {"suite/demo/t.csv": b"a,b\n1,2\n"}
        api = HfApi(endpoint=hub.url, token=hub.token)
        listed = list(api.list_bucket_tree("fake-user/tables", prefix="suite/", recursive=True))
        assert [(f.path, f.size) for f in listed] == [("suite/demo/t.csv", 8)]

        class Download(HfApi):  # the download itself is Xet: written here from the fake's store
            def download_bucket_files(self, bucket_id, files, raise_on_missing_files=True, token=None):
                for f, dest in files:
                    open(dest, "wb").write(hub.buckets[bucket_id][f.path])

        got = fetch_bucket(
            "hf://buckets/fake-user/tables/suite/demo/t.csv", tmp_path, api=Download(endpoint=hub.url, token=hub.token)
        )
        assert got["t.csv"].read_bytes() == b"a,b\n1,2\n"
        with pytest.raises(StagingError, match="nothing at prefix"):
            fetch_bucket("hf://buckets/fake-user/tables/nowhere/", tmp_path, api=api)


def test_a_job_a_remote_server_calls_back_exposes_its_engine_on_a_pinned_port():
    """`train-blackbox --env-url`: the Space's capture reaches the job's engine through the jobs proxy,
    so the engine's port is pinned at submission and exposed (sent in the run_job request)."""
    from huggingface_hub import HfApi

    from dagent.launch.job import job_spec, submit
    from dagent.launch.ports import job_ports
    from tests.fake_hub import FakeHub

    req = "dagent[gpu] @ git+https://github.com/o/dagent@" + "c" * 40
    spec = job_spec(
        "train-blackbox", ["--mode", "async", "--env-url", "https://me-bb.hf.space"], flavor="h200x2", requirement=req
    )
    assert spec.expose == (8000,) and ("DAGENT_ENGINE_PORT", "8000") in spec.env
    argv = spec.hf_command()
    assert argv[argv.index("--expose") + 1] == "8000" and argv.index("--expose") < argv.index("--")
    assert job_ports({"JOB_ID": "123", "DAGENT_ENGINE_PORT": "8000"}).engine == 8000  # what the job then binds
    assert job_spec("train-blackbox", ["--mode", "async"], requirement=req).expose == ()  # its own server: nothing
    with FakeHub() as hub:
        submit(spec, api=HfApi(endpoint=hub.url, token=hub.token), environ={})
        (job,) = hub.jobs.values()
        assert "8000" in json.dumps(job["spec"])
