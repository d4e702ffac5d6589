"""The data-agent white-box environment: the client lives in the `dagent` package."""

from dagent.envs.whitebox_client import WhiteBoxHTTP, white_box_client

__all__ = ["WhiteBoxHTTP", "white_box_client"]
