"""Evaluation of agents: an experiment over one or more arms (`experiment`), the agent each arm
runs and what it needs started (`stack`), checkpoints watched as they appear (`checkpoints`),
episodes on a running environment server (`remote`), paired statistics and pass@k (`scoring`),
`results.md` and plots (`report`), results on the Hub (`hub`), re-grading recorded answers
(`regrade`) and recorded rollouts (`recordings`).
"""
