"""The recipes: one `resolve(kind, preset, **overrides)` for both loops, one `Recipes` record a
command resolves once and passes down, and the refusals that name the fix."""

import pytest

from dagent.errors import ConfigError
from dagent.recipes import PRESETS, BlackboxRecipe, Recipes, WhiteboxRecipe, resolve


def test_resolve_gives_each_loops_preset_with_the_overrides_a_run_sets():
    assert resolve("whitebox", "cpu") == WhiteboxRecipe.cpu()
    assert resolve("blackbox", "gpu-steps25") == BlackboxRecipe.gpu_steps25()
    got = resolve("whitebox", "cpu", max_steps=8, learning_rate=None, seed=3)  # None keeps the preset's
    assert (got.max_steps, got.learning_rate, got.seed) == (8, WhiteboxRecipe.cpu().learning_rate, 3)
    assert resolve("blackbox", "cpu", groups_per_step=3).groups_per_step == 3


def test_groups_per_step_sets_the_white_box_per_device_batch_or_is_refused():
    cpu = WhiteboxRecipe.cpu()  # G=4, one accumulation step
    two = resolve("whitebox", "cpu", groups_per_step=2)
    assert two.per_device_train_batch_size == 2 * cpu.num_generations
    assert two.per_device_train_batch_size * two.gradient_accumulation_steps == 2 * two.num_generations
    gpu = WhiteboxRecipe.gpu()  # G=8, 4 accumulation steps: 1 group of 8 splits, 0 groups does not
    assert resolve("whitebox", "gpu", groups_per_step=1).per_device_train_batch_size == 2
    with pytest.raises(ConfigError, match="--groups-per-step 0"):
        resolve("whitebox", "gpu", groups_per_step=0)
    assert gpu.per_device_train_batch_size == 2


def test_unknown_kinds_and_presets_are_refused_naming_the_choices():
    with pytest.raises(ConfigError, match="use whitebox or blackbox"):
        resolve("greybox", "cpu")
    with pytest.raises(ConfigError, match="unknown preset 'fast' for whitebox: use gpu, cpu"):
        resolve("whitebox", "fast")
    with pytest.raises(ConfigError, match="unknown preset 'fast': use cpu, gpu, gpu-steps25"):
        Recipes.of("fast")


def test_one_presets_recipes_give_each_agent_its_loops_conditions():
    cpu = Recipes.of("cpu")
    assert cpu.conditions("tools") == WhiteboxRecipe.cpu().conditions
    assert cpu.conditions("pi") == cpu.conditions("opencode") == BlackboxRecipe.cpu().conditions
    assert cpu.conditions("oracle") is None and cpu.step_cap("oracle") is None
    assert cpu.step_cap("tools") == WhiteboxRecipe.cpu().max_tool_calling_iterations
    long = Recipes.of("gpu-steps25")  # a black-box preset only
    assert long.whitebox is None and long.step_cap("pi") == 25
    with pytest.raises(ConfigError, match="preset 'gpu-steps25' has no whitebox recipe.*use gpu, cpu"):
        long.for_agent("tools")
    assert set(PRESETS) == {"whitebox", "blackbox"}


def test_the_agent_stack_refuses_a_preset_without_the_agents_loop_before_an_engine_starts(suite, monkeypatch):
    import dagent.engine.process as process
    from dagent.eval.stack import agent_stack

    started = []
    monkeypatch.setattr(process.LocalEngineProcess, "__enter__", lambda self: started.append(self) or self)
    with pytest.raises(ConfigError, match="has no whitebox recipe"):
        with agent_stack("tools", suite, recipes=Recipes.of("gpu-steps25")):
            pass
    assert started == []


def test_dagent_eval_resolves_its_preset_once(tmp_path, monkeypatch, suite_dir):
    """The command resolves `--preset` where it starts; evaluation, the step caps and the recorded
    conditions all read that one object."""
    from typer.testing import CliRunner

    import dagent.eval.args as args_module
    from dagent.cli.app import app

    calls = []
    real = Recipes.of.__func__

    def counted(cls, preset):
        calls.append(preset)
        return real(cls, preset)

    monkeypatch.setattr(args_module.Recipes, "of", classmethod(counted))
    r = CliRunner().invoke(
        app,
        [
            "eval",
            "--agent",
            "oracle",
            "--split",
            "train",
            "--limit",
            "1",
            "--workers",
            "1",
            "--preset",
            "cpu",
            "--suite",
            str(suite_dir),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert r.exit_code in (0, 2), (r.output, r.exception)  # 2: the oracle missed a task (this fixture plants one)
    assert (tmp_path / "out" / "oracle" / "records.jsonl").is_file()
    assert calls == ["cpu"]


def test_the_cpu_preset_generates_the_way_measured_fastest_on_its_cpu(monkeypatch):
    """Native bfloat16: TRL's generation in a bf16 autocast; emulated: float32 through the engine.
    The GPU recipe generates with vLLM, whatever the field says."""
    import dagent.recipes.whitebox as whitebox

    for native, expected in ((True, (True, "transformers")), (False, (False, "engine"))):
        monkeypatch.setattr(whitebox, "cpu_has_bf16", lambda native=native: native)
        cpu = WhiteboxRecipe.cpu()
        assert (cpu.bf16, cpu.generator) == expected
    assert WhiteboxRecipe.gpu().use_vllm
    with pytest.raises(ConfigError, match="generator 'vllm'"):
        WhiteboxRecipe.cpu(generator="vllm")


def test_the_black_box_cpu_preset_serves_rollouts_in_bfloat16_only_where_the_cpu_computes_it(monkeypatch):
    """The sync trainer's in-process engine autocasts to bfloat16 on a CPU with native bfloat16
    (the trainer's own forward is bf16 there too), keeps float32 where it is emulated or asked for,
    and the GPU recipe (vLLM serves async) never asks the in-process engine for it."""
    import dagent.recipes.blackbox as blackbox

    for native, expected in ((True, "bfloat16"), (False, None)):
        monkeypatch.setattr(blackbox, "cpu_has_bf16", lambda native=native: native)
        assert BlackboxRecipe.cpu().engine_dtype == expected
        assert BlackboxRecipe.cpu(generation_dtype="float32").engine_dtype is None
    assert BlackboxRecipe.gpu().engine_dtype is None
    assert resolve("blackbox", "cpu", generation_dtype="float32").engine_dtype is None
    with pytest.raises(ValueError, match="auto or float32"):
        _ = BlackboxRecipe.cpu(generation_dtype="bf16").engine_dtype
