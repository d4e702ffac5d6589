"""White-box GRPO: the trainer owns the loop; TRL's GRPOTrainer calls the environment's tools (`grpo`),
generating through dagent's engine (`engine_generation`) or a bfloat16 copy on CPU (`cpu_generation`)."""
