"""Client for this Space (re-exported from the installed `dagent` package; never imports the server)."""

from dagent.envs.whitebox_client import EnvServerError, WhiteBoxHTTP, unwrap, unwrap_tool_result, white_box_client

__all__ = ["EnvServerError", "WhiteBoxHTTP", "unwrap", "unwrap_tool_result", "white_box_client"]
