"""The core records, pure: the task and its public view (`task`), a suite with its splits, tiers
and curriculum (`suite`), the reward (`reward`), engine sampling defined once (`sampling`) and the
outcome vocabulary: correct / wrong / ungraded with a cause, evaluation records and their summary
(`outcome`). Nothing here imports an adapter.
"""
