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
