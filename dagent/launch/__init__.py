"""Launching dagent's jobs elsewhere: HF Jobs (`job`), with this project pinned at a commit."""
