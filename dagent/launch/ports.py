"""Ports derived from the job id (F36): two jobs on one host must never answer each other's probes.

A fixed port is answered by whichever job bound it first: a second job's preflight then passes
against the FIRST job's engine (and would train against its weights). Every port a job opens is
`BASE + (job id % SLOTS) * STRIDE + k`, the same rule the Slurm script applies in bash.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dagent import settings
from dagent.errors import ConfigError

PORT_BASE, PORT_SLOTS, PORT_STRIDE = 20000, 4000, 10  # clear of the ephemeral range (32768+)
JOB_ID_VARIABLES = ("SLURM_JOB_ID", "JOB_ID", "DAGENT_JOB_ID")
#: The engine's port pinned by the launcher where it must be known before the job runs: an HF Job
#: whose engine a remote Space reaches is exposed on a port named at submission (its own container,
#: so no other job shares it).
ENGINE_PORT_VARIABLE = "DAGENT_ENGINE_PORT"
EXPOSED_ENGINE_PORT = 8000


@dataclass(frozen=True)
class JobPorts:
    job_id: int
    engine: int  # vLLM's HTTP port
    group: int  # the trainer <-> engine weight-transfer group
    env: int  # the environment server
    capture: int  # the capture proxy

    @classmethod
    def for_job(cls, job_id: int | str) -> JobPorts:
        try:
            jid = int(str(job_id).strip())
        except ValueError:
            raise ConfigError(f"job id {job_id!r} is not a number: ports derive from a numeric job id") from None
        base = PORT_BASE + (jid % PORT_SLOTS) * PORT_STRIDE
        return cls(jid, base, base + 1, base + 2, base + 3)


def job_id(environ: dict[str, str] | None = None) -> str | None:
    """This job's id from the scheduler's environment (Slurm, HF Jobs, or set by hand)."""
    return next(filter(None, (settings.read(v, environ) for v in JOB_ID_VARIABLES)), None)


def job_ports(environ: dict[str, str] | None = None) -> JobPorts:
    """The ports of the job this process runs in; refused without a job id (F36)."""
    jid = job_id(environ)
    if jid is None:
        raise ConfigError(
            f"no job id in {', '.join(JOB_ID_VARIABLES)}: set DAGENT_JOB_ID so every port derives from "
            "it; fixed ports let a second job on this host probe the first job's engine (F36)"
        )
    digits = "".join(c for c in jid if c.isdigit())
    ports = JobPorts.for_job(digits or str(abs(hash(jid)) % 10**6))
    pinned = settings.read(ENGINE_PORT_VARIABLE, environ)
    return replace(ports, engine=int(pinned)) if pinned else ports
