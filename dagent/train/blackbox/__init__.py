"""Black-box GRPO: the agent owns its loop and the trainer trains on what capture recorded: sync
(`trainer`: GRPOTrainer(rollout_func), the model served in-process) and async (`async_trainer`:
AsyncGRPOTrainer + HarnessRolloutWorker), their arguments (`args`) read once into the plan both
build from (`plan`), rows (`rollouts`), shared prompts
(`shared_prefix`) and warm-start demonstrations in a harness's format (`harness_demos`)."""
