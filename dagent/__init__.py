"""dagent: train and evaluate LLM data agents with reinforcement learning.

The pure core (tasks, grading, reward, trajectory analysis, evaluation stats) never imports an
adapter (sandbox/, engine/, capture, harness/, hub, envs/). Data flows one way:
task -> sandbox -> agent/engine -> capture -> trajectory -> grade -> reward -> trainer or report.
"""

__version__ = "0.1.0"
