"""dagent: train and evaluate LLM data agents with reinforcement learning.

Data flows one way: task -> sandbox -> agent/engine -> capture -> trajectory -> grade -> reward ->
trainer or report. The package is a partial order of rooms (its subpackages and root modules), not a
ladder: each line below names rooms, [the rooms they build on directly] and what they hold. A module
imports from its own room or from a room its room builds on, directly or through others, never in a
circle; and every room listed is built on by the code exactly as listed (tests/test_layers.py holds
the code to this list both ways, so the list is the real graph).

  base: what every other room uses (core, grading and trajectory are pure: no adapter, no I/O library)
    errors clock jobargs failures  []            one error root, a clock, job arguments, the failure modes
    settings    [errors]                         every environment variable dagent reads, one record per server
    serving     [errors]                         a threaded uvicorn server
    provenance  [settings]                       where a result came from
    core        [errors]                         the task, the suite, reward, sampling, the outcome vocabulary
    grading     [core]                           single values, multi-field answers, the dispatch, settling
    trajectory  [errors]                         captured calls, linking and drift, the gate, the audit, exports

  infrastructure: where agents run and what serves them
    sandbox     [clock core settings]            local tiers (bwrap, mountns, landlock, cwd), E2B, HF, staging, images
    engine      [core serving settings]          the local engine (batching, the model), vLLM processes
    launch      [provenance sandbox serving]     HF Jobs, Slurm and Spaces: ports, submission, deployment

  white-box: the environment owns the loop
    tools       [grading sandbox]                the tool surface, its implementations, the episode state machine

  black-box: the agent owns the loop, observed through capture
    capture     [sandbox serving trajectory]     the proxy that records the engine's own token ids, logprobs, masks
    harness     [capture provenance tools]       the agent protocol, the oracle, the tool loop, opencode and pi
    harbor      [harness]                        the suite as a Harbor catalog, Harbor run without Docker
    runtime     [harbor]                         the black-box runtime: capture, sandboxes, harness, settled rollouts

  top: what users run
    suites      [harness]                        task sources (local, Hub), import, check, push
    recipes     [harness]                        both loops' training recipes and episode conditions, by preset
    envs        [runtime suites]                 each loop's runtime, server and session: whitebox_*, blackbox_*
    eval        [engine envs recipes]            experiments, the agent stack, scoring, reports, the Hub
    train       [engine envs launch recipes]     shared assembly, whitebox/, blackbox/, verify/ (SFT, GRPO, checks)
    demo        [eval]                           the demo's pure views and per-tab sessions (app.py is its shell)
    reproduce   [eval train]                     `dagent reproduce`: the stage pipeline and its receipts
    cli         [jobargs reproduce]              the `dagent` command: parses, calls one library function, prints

Imports stand at the top of a module. Inside a function only an optional extra (torch, transformers,
trl, vllm, gradio, ...: HEAVY in tests/test_layers.py), or a dagent module that brings one with it,
is imported, so a base install and the command line start without them; and a few installed but slow
libraries used by few commands (pandas, pyarrow, sympy, ...: SLOW there).
"""

__version__ = "0.1.0"
