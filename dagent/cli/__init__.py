"""The `dagent` command (Typer): `app` holds the command (its `rollout`, `reproduce`, `train` and
`engine` subcommands, the other groups registered on it), each subcommand a thin call into the
library; `common` the options and helpers they share; `suite` the `suite`, `tasks` and `export`
groups; `eval` the `eval` group; `launch` the `jobs`, `space` and `sandbox` groups;
`reproduce` every stage of `dagent reproduce` from the suite to the paired evaluation, and
`receipts` the receipts and results it writes.
"""
