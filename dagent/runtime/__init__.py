"""The black-box runtime (`blackbox.BlackBoxRuntime`): what a harness that owns its loop needs around
it, started and stopped together: the capture proxy in front of the engine, its publisher, sandboxes
that can reach it, the harness (opencode, pi, or either through `harbor run`), and the settled
rollout (trajectory, gate, grade, reward). Trainers, evaluation, `dagent reproduce`, the benchmarks
and the black-box server all use it; the server (`dagent.envs.blackbox_server`) only serves it."""
