"""Training: the SFT warm start from oracle demonstrations (`sft`), white-box GRPO over the tool
environment (`grpo`), black-box GRPO over captured harness rollouts in sync mode (`blackbox`, rows
by TRL's own conversion in `rollouts`, harness routing per group in `routing`) and async mode
(`blackbox_async`), the checks that refuse a run before it starts (`preflight`), the health watch
while it trains (`health`), the time budget (`budget`), step timing (`timing`), curves (`curves`),
provenance stamped into each checkpoint (`stamp`), checkpoints pushed to the Hub
(`hub_checkpoints`), the check that a step moves each rollout its advantage's way (`direction`) with
its truth from outside the trainer (`truth`: the sampler's own output, the grader's verdicts), every
option read or refused on every launch path (`options`, F59) and
completion-only log-prob scoring on CPU (`scoring`)."""
