"""Tests that pass as generated; add yours beside them."""

from __future__ import annotations

from echo_agent_client._generated.dispatcher import ClientBase
from echo_agent_client.handlers import Client


def test_handlers_subclass_the_generated_base() -> None:
    assert issubclass(Client, ClientBase)
