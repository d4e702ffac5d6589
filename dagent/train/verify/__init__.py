"""Verification of the training signal: one optimizer step measured against truth taken from outside
the trainer (`direction`, `truth`); tests/train/test_direction.py and scripts/gpu_check.py run it."""
