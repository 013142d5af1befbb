"""Small typed helpers for the content a client sends and reads, as wire dicts (the
generated `AgentConnection` takes them where it takes the revision's models):

    await prompt_turn(agent, client, sid, text("summarise"), json_input(doc))
    output_of(params, Output)   # in `session_update`: the agent's typed Output, or None

The block shapes (`text`, `image`, `audio`, `resource_link`, `resource`) are the ones
every ACP revision shares; a JSON input travels as an embedded resource with mimeType
`application/json`, as the runtime's agents read it.
"""

from __future__ import annotations

import base64
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

Block = dict[str, Any]
JSON_MIME = "application/json"


def text(value: str) -> Block:
    """A text block."""
    return {"type": "text", "text": value}


def image(data: bytes, mime_type: str, *, uri: str | None = None) -> Block:
    """An image block (`data` is base64-encoded here)."""
    block: Block = {"type": "image", "data": base64.b64encode(data).decode(), "mimeType": mime_type}
    if uri is not None:
        block["uri"] = uri
    return block


def audio(data: bytes, mime_type: str) -> Block:
    """An audio block (`data` is base64-encoded here)."""
    return {"type": "audio", "data": base64.b64encode(data).decode(), "mimeType": mime_type}


def resource_link(uri: str, name: str, *, mime_type: str | None = None) -> Block:
    """A link to a resource the agent may fetch (`file:///...`)."""
    block: Block = {"type": "resource_link", "uri": uri, "name": name}
    if mime_type is not None:
        block["mimeType"] = mime_type
    return block


def resource(uri: str, body: str, *, mime_type: str = "text/plain") -> Block:
    """An embedded text resource (a file's content sent along)."""
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": body}}


def json_input(value: Any, *, uri: str = "acp:input") -> Block:
    """The manifest's Input (a model or plain JSON data) as the prompt carries it."""
    import json

    dump = getattr(value, "model_dump", None)
    data = dump(by_alias=True, exclude_unset=True, mode="json") if dump is not None else value
    return resource(uri, json.dumps(data, ensure_ascii=False), mime_type=JSON_MIME)


def prompt(session_id: str, *blocks: Block | str) -> dict[str, Any]:
    """`session/prompt` params: `blocks` in order, a str as a text block."""
    return {
        "sessionId": session_id,
        "prompt": [text(b) if isinstance(b, str) else b for b in blocks],
    }


def update_of(params: Any) -> dict[str, Any]:
    """The update a `session/update` carries, as a wire dict (from the model or the dict)."""
    dump = getattr(params, "model_dump", None)
    wire = dump(by_alias=True, exclude_unset=True, mode="json") if dump is not None else params
    update = wire.get("update") if type(wire) is dict else None
    return update if type(update) is dict else {}


def _blocks(update: dict[str, Any]) -> list[dict[str, Any]]:
    content = update.get("content")
    items = content if type(content) is list else [content]
    return [b for b in items if type(b) is dict]


def _is_message(update: dict[str, Any]) -> bool:
    # v1 `agent_message_chunk`; v2 `agent_message_chunk` and `agent_message`
    return str(update.get("sessionUpdate", "")).startswith("agent_message")


def text_of(params: Any) -> str:
    """The text of an agent message update ("" for any other update)."""
    update = update_of(params)
    if not _is_message(update):
        return ""
    return "".join(str(b.get("text", "")) for b in _blocks(update) if b.get("type") == "text")


def json_of(params: Any) -> Any:
    """The JSON document an agent message update carries (its typed output), else None."""
    import json

    update = update_of(params)
    if not _is_message(update):
        return None
    for block in _blocks(update):
        res = block.get("resource") if block.get("type") == "resource" else None
        if type(res) is dict and res.get("mimeType") == JSON_MIME and type(res.get("text")) is str:
            try:
                return json.loads(res["text"])
            except ValueError:
                return None
    return None


def output_of(params: Any, model: type[M]) -> M | None:
    """The agent's output in this update as `model` (the manifest's `Output`), else None."""
    data = json_of(params)
    return None if data is None else model.model_validate(data)
