"""Training, in four rooms a reader can name (tests/test_layers.py holds the order inside `train`:
the shared modules import neither loop nor the verification, and the two loops not each other).

- `dagent.train` (this package's modules): what every trainer path shares. The SFT warm start from
  oracle demonstrations (`sft`); one trainer assembly every GRPO path builds from (`assembly`: rows,
  config, callbacks, train-and-save, resume); the arguments every trainer takes (`args`); every option
  read or refused on every launch path (`options`, F59); the checks that refuse a run before it starts
  (`preflight`); the health watch while it trains (`health`); the time budget (`budget`); step timing
  (`timing`); curves (`curves`); provenance stamped into each checkpoint (`stamp`); optimizer-state
  retention (`retention`); checkpoints pushed to the Hub (`hub_checkpoints`); the permuted control
  (`control`, F52); harness routing per group (`routing`); completion-only log-prob scoring on CPU
  (`scoring`); and every private TRL seam with the TRL release it was written for (`trl_seams`).
- `dagent.train.whitebox`: GRPO over the tool environment (`grpo`), TRL's generation through dagent's
  engine (`engine_generation`) or a bfloat16 copy on CPU (`cpu_generation`).
- `dagent.train.blackbox`: GRPO over captured harness rollouts, sync (`trainer`) and async
  (`async_trainer`), their arguments (`args`), rows by TRL's own conversion (`rollouts`), a batch's
  prompts packed as one tree (`shared_prefix`), warm-start demonstrations in a harness's own format
  (`harness_demos`).
- `dagent.train.verify`: the check that a step moves each rollout its advantage's way (`direction`),
  with its truth from outside the trainer (`truth`: the sampler's own output, the grader's verdicts).
"""
