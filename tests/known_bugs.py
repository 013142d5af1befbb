"""Known runtime bugs that tests mark (xfail strict / wire_check_known), one place to find
them: the helper fixing one removes its constant and every mark that names it."""

from __future__ import annotations

import os

import pytest

# v2 wire shapes (helper `revision`): agent_message_chunk without the required messageId,
# config options keyed `id` where v2 says `configId`, promptCapabilities inside v2
# `capabilities` (not a field there).
V2_SHAPES = (
    "v2 wire shapes: agent_message_chunk and the prompt answer lack the required messageId, config options use "
    "`id` not `configId`, v2 capabilities carry promptCapabilities (fixed by `revision`)"
)

# Config options (helper `revision`: which option kinds a revision has belongs in its
# description): a boolean option is sent as `type: boolean` on a revision whose
# SessionConfigOption has no such variant (the legacy schema: select only).
LEGACY_BOOLEAN_OPTION = (
    "a boolean config option is sent on a revision without boolean options (legacy schema); "
    "fixed by `revision`"
)


def wire_check_on() -> bool:
    """Whether the suite runs with the schema-checked wire (tests/conftest.py's default)."""
    return os.environ.get("ACP_WIRE_CHECK", "1").strip().lower() not in ("", "0", "off", "false")


def wire_xfail(reason: str) -> pytest.MarkDecorator:
    """xfail(strict) for a test that fails only because the wire check catches `reason`."""
    return pytest.mark.xfail(wire_check_on(), strict=True, reason=reason)


# v2 models (normalize/models): the official TypeScript SDK sends session/set_config_option
# as {sessionId, configId, value} with no `type`; our v2 SetSessionConfigOptionRequest union
# requires a `type` on that shape, so the agent's received-frame check flags a valid frame
# (the agent still applies the option).
V2_SET_CONFIG_UNTAGGED = (
    "v2 SetSessionConfigOptionRequest without `type` (as the TS SDK sends it) is refused by "
    "our v2 model: its untagged default member is not the fallback"
)
