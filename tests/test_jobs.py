"""The jobs' `hf jobs uv run` lines in README: each names a script whose PEP 723 header installs
dagent, whose arguments parse with the job's own parser, and which huggingface_hub's CLI resolves
(`--dry-run`, offline). Not covered: a real job on the Hub (needs the network and a token)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_job_lines() -> list[list[str]]:
    text = (ROOT / "README.md").read_text().replace("\\\n", " ")
    return [shlex.split(line.strip()) for line in text.splitlines() if line.strip().startswith("hf jobs uv run")]


def split_line(argv: list[str]) -> tuple[list[str], Path, list[str]]:
    i = next(i for i, a in enumerate(argv) if a.endswith(".py"))
    return argv[3:i], ROOT / argv[i], argv[i + 1:]


def pep723(script: Path) -> dict:
    block = re.search(r"^# /// script\n((?:#.*\n)+?)# ///$", script.read_text(), re.M)
    assert block, f"{script} has no PEP 723 block"
    return tomllib.loads("".join(line[2:] if line.startswith("# ") else line[1:] for line in block.group(1).splitlines(True)))


def test_readme_has_the_eval_and_training_job_lines():
    scripts = {split_line(a)[1].name for a in readme_job_lines()}
    assert {"eval.py", "train_whitebox.py"} <= scripts


@pytest.mark.parametrize("argv", readme_job_lines(), ids=lambda a: split_line(a)[1].name)
def test_each_job_line_resolves_and_parses(argv):
    options, script, args = split_line(argv)
    header = pep723(script)
    assert header["requires-python"] and any(d.startswith("dagent") for d in header["dependencies"])
    if script.name == "train_whitebox.py":
        from dagent.jobargs import parse
        from dagent.train.grpo import WhiteboxArgs

        recipe = parse(WhiteboxArgs, args).recipe()  # the published recipe, field by field
        assert (recipe.split, recipe.num_generations, recipe.beta, recipe.learning_rate, recipe.warmup_steps,
                recipe.per_device_train_batch_size, recipe.gradient_accumulation_steps, recipe.max_completion_length,
                recipe.output_chars, recipe.use_vllm, recipe.vllm_gpu_memory_utilization) == (
                    "train:easy", 8, 0.04, 1e-6, 10, 2, 4, 3072, 1200, True, 0.3)
    elif script.name == "eval.py":
        import typer

        from dagent.cli import app

        ctx = typer.main.get_command(app).commands["eval"].make_context("eval", list(args))
        assert ctx.params["agent"] in ("oracle", "tools", "opencode") and ctx.params["engine"] == "vllm"
    hf = Path(sys.executable).parent / "hf"
    out = subprocess.run([str(hf), "jobs", "uv", "run", "--dry-run", *options, str(script), *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "(dry run) Job not submitted." in out.stdout, out.stderr[-500:]


def test_the_gpu_recipe_samples_like_the_evaluation():
    from dagent.sampling import RECIPE_SAMPLING
    from dagent.train.grpo import Recipe, grpo_config

    config = grpo_config(Recipe.gpu(use_vllm=False, bf16=False, use_cpu=True), "/tmp/x")
    assert (config.temperature, config.top_p, config.top_k) == (0.8, 1.0, 0) == tuple(RECIPE_SAMPLING.as_request().values())
    assert config.save_only_model is False and config.max_completion_length == 3072
