"""Both servers' runtime lives in one kind of slot: unset, it fails naming how to build the app."""

import pytest

from dagent.envs import blackbox_server, whitebox_runtime
from dagent.envs.slot import RuntimeSlot
from dagent.errors import ConfigError


def test_a_slot_gives_what_was_configured_or_fails_naming_the_fix():
    slot: RuntimeSlot[object] = RuntimeSlot("build it with create_app(runtime)")
    with pytest.raises(ConfigError, match="create_app"):
        slot.current()
    runtime = object()
    assert slot.configure(runtime) is runtime and slot.current() is runtime


def test_each_servers_configure_and_current_share_its_own_slot():
    assert whitebox_runtime.configure.__self__ is whitebox_runtime.current.__self__
    assert blackbox_server.configure.__self__ is blackbox_server.current.__self__
    assert whitebox_runtime.current.__self__ is not blackbox_server.current.__self__
