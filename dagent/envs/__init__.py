"""Environment servers: the white-box environment (`whitebox`, served by `server`, reached through
`client`, routes in `contract`), the black-box runtime (`blackbox`, served by `blackbox_server`),
TRL's harness session over it (`trl_session`), and the `/health` both serve (`status`).
"""
