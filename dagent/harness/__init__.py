"""Agents: the protocol every agent meets and its run record (`base`), the step-cap contract with
the environment (`contract`), the episode skeleton every agent runs through (`play`), the oracle
(`oracle`), the white-box tool loop under training's conditions (`toolloop`), the one agent that
owns its loop observed through capture (`captured`), and its two harness definitions, opencode
(`opencode`) and pi (`pi`).
"""
