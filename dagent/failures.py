"""The silent failures dagent detects by name: code, what goes wrong, and where it is caught.

Each is a way a run of this kind was seen to fail WITHOUT an error (the run looks healthy, a
reward is computed, the number is wrong). Code and tests cite them by code (`F07`); a test that
plants one is marked `@pytest.mark.failure_mode("F07")`, and the marker refuses a code that is
not listed here. `detector` names the dagent object that fires, or is None where nothing detects
it yet (planned in an open issue).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FailureMode:
    code: str
    title: str  # one line: what silently goes wrong
    detector: str | None  # the module.object that names it, None while undetected


_MODES = (
    # tokens and capture
    ("F01", "a turn re-rendered locally differs from the tokens the engine scored", "dagent.trajectory.audit.audit"),
    (
        "F02",
        "legitimate drift at a turn boundary mistaken for fragmentation (or the reverse)",
        "dagent.trajectory.linking.measure_drift",
    ),
    (
        "F03",
        "auxiliary calls or sub-agents trained as if they were the agent's turns",
        "dagent.trajectory.analysis.analyse",
    ),
    (
        "F04",
        "a re-rendering harness makes every turn its own root (per_turn_capture_only)",
        "dagent.trajectory.gate.gate",
    ),
    ("F05", "engine sampling differs from the trainer's (temperature, truncation)", "dagent.capture.wire.prepare"),
    (
        "F06",
        "trainer dtype differs from the engine's: biased importance ratio",
        "dagent.train.blackbox.async_engine.check_dtype",
    ),
    ("F07", "zero model calls grade exactly like a wrong answer", "dagent.grading.settle.settle"),
    ("F08", "the capture proxy advertised at a loopback URL to a remote sandbox", "dagent.capture.reach.Publisher"),
    ("F09", "a tunnel that hangs at start-up, or outlives the server", "dagent.capture.reach.start_bounded"),
    ("F10", "an agent loops far past any sensible length", "dagent.capture.proxy.Forwarder"),
    # tasks and data
    ("F11", "two tasks share an instruction with different golds", "dagent.core.suite.TaskSuite.resolve_prompt"),
    ("F12", "a curriculum that silently degrades into a shuffle", "dagent.core.suite.TaskSuite.prompt_rows"),
    ("F13", "double-tiered split names; difficulty typed as the wrong kind", "dagent.core.suite.parse_split"),
    ("F14", "grading through the public view, which withholds gold", "dagent.grading.dispatch.grade"),
    ("F15", "train and test overlap", "datasets_build.build.build_suite"),
    ("F16", "a gold computed by a tool missing in the sandbox", "dagent.harness.oracle.OracleAgent"),
    # sandbox and staging
    ("F17", "a successful exit 0 read as failure", "dagent.sandbox.base.ExecResult"),
    ("F18", "an out-of-memory kill or timeout graded as a wrong answer", "dagent.grading.settle.settle"),
    ("F19", "the instruction passed through a shell word (backticks ran)", "dagent.harness.opencode.OpencodeHarness"),
    (
        "F20",
        "the agent's home differs by backend: config written where it cannot be read",
        "dagent.sandbox.sandbox_home",
    ),
    (
        "F21",
        "a transient staging error kills an episode; an empty input dir looks like a wrong answer",
        "dagent.sandbox.staging",
    ),
    ("F22", "secrets reach a log or trace through a command string", "dagent.sandbox.describe_secrets"),
    # environment server and tools
    ("F23", "concurrent sessions capped at 1 by default", "dagent.envs.whitebox_server"),
    (
        "F24",
        "long rollouts excluded by transport failures, score over a shrunk set",
        "dagent.core.outcome.EvalSummary.lines",
    ),
    ("F25", "tool schema, client methods and served tools drift apart", "dagent.tools.surface.Signatures"),
    ("F26", "the terminator counted against the step budget", "dagent.tools.episode.Episode"),
    ("F27", "submit_solution rejects a bare number", "dagent.tools.surface.coerce_answer"),
    (
        "F28",
        "the instruction says write a file while the mode submits through a tool",
        "dagent.tools.episode.reword_submission",
    ),
    ("F29", "protocol envelopes handed to callers unwrapped", "dagent.envs.whitebox_client"),
    ("F30", "wrong routes copied from another env: a 404 that reads as a dead server", "dagent.envs.contract.task_api"),
    (
        "F31",
        "a harness config option that does not exist is silently ignored",
        "dagent.harness.opencode.check_rendered",
    ),
    # reward and training
    (
        "F32",
        "an infrastructure failure coerced to 0.0 on the way to the trainer or report",
        "dagent.core.reward.reward",
    ),
    ("F33", "reward shaping that makes inaction optimal", "dagent.core.reward.reward"),
    ("F34", "a reward field nobody writes (tool calls read from a file)", "dagent.harness.captured.count_tool_calls"),
    ("F35", "the agent's step cap above the environment's step budget", "dagent.harness.contract.check_step_cap"),
    ("F36", "fixed ports: one job's probes answered by another job's engine", "dagent.engine.process.served_model"),
    (
        "F37",
        "engine started without the flags the trainer needs",
        "dagent.train.blackbox.async_engine.preflight_engine",
    ),
    (
        "F38",
        "trainer defaults that do not fit agent rollouts (token budget, heartbeat, lengths)",
        "dagent.train.blackbox.async_trainer.check_config",
    ),
    ("F39", "groups where every rollout scores alike carry no gradient", "dagent.train.preflight.check_group_size"),
    ("F40", "harness routing that mixes harnesses inside a group", "dagent.train.routing.pad_coprime"),
    # evaluation and operations
    ("F41", "a baseline far from its known value published as a result", "dagent.eval.experiment.check_baseline"),
    ("F42", "a checkpoint watcher looking in the wrong directory", "dagent.eval.checkpoints.watch"),
    (
        "F43",
        "generated output committed to git; generated files hand-edited and stale",
        "dagent.harbor.export.verify_catalog",
    ),
    ("F44", "an installed package or container start command that misses a module", "tests/envs/test_space.py"),
    # found by reading and running this project against the seed
    (
        "F45",
        "a remote sandbox's egress decided before the capture URL is known: zero model calls",
        "dagent.capture.reach.verify_reach",
    ),
    ("F46", "a recipe value a library silently overrides (the config reads one thing, the run does another)", None),
    ("F47", "evaluation under other episode conditions than training", "dagent.core.conditions.conditions_differ"),
    (
        "F48",
        "a curriculum or filter that empties part of a split without a word",
        "dagent.core.suite.TaskSuite.prompt_rows",
    ),
    (
        "F49",
        "two engines on one accelerator without sized memory: the second dies or starves",
        "dagent.engine.sizing.size_engines",
    ),
    ("F50", "a job or image that cannot install what its command needs", "tests/launch/test_environments.py"),
    (
        "F51",
        "a sandbox image without the data stack: the oracle's answer file is empty",
        "dagent.harness.readiness.check_image",
    ),
    ("F52", "a training control that cannot differ from its baseline", "dagent.train.control.control_moved_callback"),
    ("F53", "a sandbox network rule that covers one protocol only (Landlock's TCP rules miss UDP, MPTCP, SCTP)", None),
    ("F54", "a sandbox sharing the server's uid without namespaces (signals, ptrace, /proc, shared limits)", None),
    (
        "F55",
        "a group-size check from the mean pass rate: spread per-task rates leave far more groups alike",
        "dagent.train.preflight.check_group_size",
    ),
    (
        "F56",
        "a learning claim from a run without the power to see the effect it claims or denies",
        "dagent.eval.power.verdict",
    ),
    (
        "F57",
        "a check whose expected value comes from the code under test (its truth read from the trainer's batch)",
        "dagent.train.verify.direction.check_arm",
    ),
    (
        "F58",
        "a pooled interval that resamples seeds' shared tasks as if independent: too narrow",
        "dagent.eval.pooled.crossed_ci",
    ),
    (
        "F59",
        "an option one launch path drops silently (an async launcher that never reads --control)",
        "dagent.train.options.unread",
    ),
    (
        "F60",
        "held-out tasks reused without saying: a result 'opened once' on tasks earlier runs looked at",
        "dagent.eval.opened.Ledger.require_fresh",
    ),
    (
        "F61",
        "a group's rollouts drawn from one sampling seed: identical rollouts, zero advantage, no error",
        "dagent.train.blackbox.rollouts.check_group_seeds",
    ),
)

FAILURE_MODES: dict[str, FailureMode] = {code: FailureMode(code, title, det) for code, title, det in _MODES}


def failure_mode(code: str) -> FailureMode:
    """The registered failure mode `code`; KeyError names the known range when it is not one."""
    try:
        return FAILURE_MODES[code]
    except KeyError:
        raise KeyError(
            f"{code!r} is not a registered failure mode (F01..F{len(FAILURE_MODES):02d}, dagent/failures.py)"
        ) from None
