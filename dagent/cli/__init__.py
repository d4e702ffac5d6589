"""The `dagent` command (Typer): `app` holds the subcommands, each a thin call into the library;
`common` the options and helpers they share; `launch` the `jobs`, `space` and `sandbox` groups;
`reproduce` every stage of `dagent reproduce` from the suite to the paired evaluation, and
`receipts` the receipts and results it writes.
"""
