"""Environment servers, the two loops side by side: white-box `whitebox_runtime` (episodes, the MCP
faces, the in-process environment class), `whitebox_session` (the face MCP sessions talk to),
`whitebox_server` (openenv, MCP, the Task API), `whitebox_client` (the HTTP client and its
environment class); black-box `blackbox_server` over the runtime one floor down
(`dagent.runtime.blackbox`) and `blackbox_session` (TRL's harness session); shared: the routes
(`contract`, `mcp_route`), the runtime slot (`slot`) and the `/health` both serve (`status`).
"""
