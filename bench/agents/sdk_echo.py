"""Echo agent written with the official ACP Python SDK (the benchmark's reference).

Same behaviour as the generated echo agent: each text block of a prompt is streamed
back as one `agent_message_chunk` with the same text, then the turn ends.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from acp import (
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    run_agent,
    text_block,
    update_agent_message,
)
from acp.schema import Implementation


class EchoAgent:
    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=1, agent_info=Implementation(name="sdk-echo", version="1")
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id=uuid.uuid4().hex)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        for block in prompt:
            text = getattr(block, "text", None)
            if text is not None:
                await self._conn.session_update(session_id, update_agent_message(text_block(text)))
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None


def main() -> None:
    asyncio.run(run_agent(EchoAgent(), stdio_buffer_limit_bytes=64 * 1024 * 1024))


if __name__ == "__main__":
    main()
