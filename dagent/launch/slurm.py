"""The same jobs on a Slurm cluster: an `sbatch` script from a `JobSpec`'s pinned project.

For white-box training the node's GPUs are split: the first `engine_gpus` serve the policy with
`trl vllm-serve`, the rest run the trainer (`--processes N`: the job relaunches itself under `accelerate launch`),
which reaches the engine in TRL's
server mode. Every port is derived from `$SLURM_JOB_ID`, so two jobs sharing a node never answer
each other's probes (F36: a fixed port is answered by whichever job bound it first). Everything
runs through `uv run --with <the pinned dagent[gpu]>` (vLLM included: TRL's server mode imports it in
the trainer for the weight sync), so the cluster needs uv, not a checkout.

    print(sbatch_script(job_spec("train-whitebox", ["--preset", "gpu", "--model", "OWNER/SFT"]),
                        gpus=8, engine_gpus=2, model="OWNER/SFT", time="12:00:00"))
"""

from __future__ import annotations

import shlex

from dagent.errors import ConfigError
from dagent.launch.job import JobSpec
from dagent.launch.ports import PORT_BASE, PORT_SLOTS, PORT_STRIDE

__all__ = ["PORT_STRIDE", "sbatch_script"]


def _command(spec: JobSpec) -> list[str]:
    """The job as a `dagent` command line (the installed package; no script file needed)."""
    sub = {
        "jobs/eval.py": ["eval"],
        "jobs/train_whitebox.py": ["train", "whitebox"],
        "jobs/train_blackbox.py": ["train", "blackbox"],
    }.get(spec.script)
    if sub is None:
        raise ConfigError(f"{spec.script} has no dagent command to run on Slurm: run it from a checkout")
    return ["-m", "dagent.cli.app", *sub]


def sbatch_script(
    spec: JobSpec,
    *,
    gpus: int = 8,
    engine_gpus: int = 1,
    model: str | None = None,
    time: str = "24:00:00",
    partition: str | None = None,
    cpus_per_gpu: int = 8,
) -> str:
    """An sbatch script running `spec` on one node (see the module docstring)."""
    training = spec.script == "jobs/train_whitebox.py"
    if training and not 0 < engine_gpus < gpus:
        raise ConfigError(f"engine_gpus={engine_gpus} must leave the trainer at least one of {gpus} GPUs")
    if training and not model:
        raise ConfigError("give model= (the policy the engine serves; the trainer's --model)")
    if not spec.requirement.startswith("dagent[gpu]"):
        raise ConfigError(
            f"{spec.requirement!r} is not the GPU job environment: build the spec with extras='gpu' "
            "(vLLM beside TRL; `dagent jobs slurm` does)"
        )
    name = dict(spec.labels).get("job", "dagent")
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=dagent-{name}",
        "#SBATCH --nodes=1",
        f"#SBATCH --gpus-per-node={gpus}",
        f"#SBATCH --cpus-per-task={gpus * cpus_per_gpu}",
        f"#SBATCH --time={time}",
        "#SBATCH --output=%x-%j.out",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    lines += [
        "set -euo pipefail",
        "# ports from the job id: another job on this node never answers this one's probes (F36)",
        f"BASE=$(( {PORT_BASE} + (SLURM_JOB_ID % {PORT_SLOTS}) * {PORT_STRIDE} ))",
        "ENGINE_PORT=$BASE",
        "GROUP_PORT=$(( BASE + 1 ))",
        f"REQ={shlex.quote(spec.requirement)}",
        f'UV=(uv run --python {spec.python} --with "$REQ")',
    ]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in spec.env]
    lines += [f': "${{{n}:?export {n} before sbatch (sent by name, never written here)}}"' for n in spec.secrets]
    args = " ".join(shlex.quote(a) for a in spec.args)
    if training:
        engine = ",".join(map(str, range(engine_gpus)))
        trainer = ",".join(map(str, range(engine_gpus, gpus)))
        lines += [
            f"# GPUs {engine}: the engine; {trainer}: the trainer",
            f'CUDA_VISIBLE_DEVICES={engine} "${{UV[@]}}" trl vllm-serve --model {shlex.quote(model)} '
            f'--port "$ENGINE_PORT" --tensor-parallel-size {engine_gpus} &',
            "ENGINE=$!",
            "trap 'kill $ENGINE 2>/dev/null || true' EXIT",
            "for _ in $(seq 1 900); do",
            '  curl -sf "http://127.0.0.1:$ENGINE_PORT/health/" >/dev/null && break',
            "  kill -0 $ENGINE 2>/dev/null || { echo 'the engine exited before it answered' >&2; exit 1; }",
            "  sleep 2",
            "done",
            # --processes: the job relaunches itself under `accelerate launch` (dagent.launch.processes),
            # the same path an HF Jobs multi-GPU flavour takes
            f'CUDA_VISIBLE_DEVICES={trainer} "${{UV[@]}}" python {" ".join(_command(spec))} {args} '
            f'--processes {gpus - engine_gpus} --vllm-server-url "http://127.0.0.1:$ENGINE_PORT" '
            '--vllm-group-port "$GROUP_PORT"',
        ]
    else:
        lines.append(f'"${{UV[@]}}" python {" ".join(_command(spec))} {args}')
    return "\n".join(lines) + "\n"
