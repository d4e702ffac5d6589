"""Training: the SFT warm start from oracle demonstrations (`sft`), the checks that refuse a run
before it starts (`preflight`) and the health watch while it trains (`health`)."""
