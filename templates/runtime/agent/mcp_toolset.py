"""The session's MCP tools as a pydantic-ai toolset (`turn.mcp.toolset()`): the model
calls them through the session's own connections (mcp_servers.py), one per server.

Imported only by `TurnMcp.toolset`: it needs `pydantic-ai-slim`, which a project without
a model does not install.  A tool whose server reports an error, or whose server failed,
comes back to the model as a failed tool result (`ToolFailed`, shown `failed`) carrying
the error's text; it does not use up the model's retries (the turn's limits bound it).
An error's text above `ACP_TOOL_OUTPUT_LIMIT` bytes is cut, with a note (run_model cuts
every result the same way: model/limits.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from ..wire.fields import bounded
from .mcp_link import McpTool, McpToolError, McpToolResult

if TYPE_CHECKING:
    from pydantic_ai import RunContext

# the MCP server checks a call's arguments itself: the toolset passes any object through
_ARGS = SchemaValidator(core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()))
MAX_RETRIES = 1  # retries the model gets after an error of one tool


class McpTools(Protocol):
    """What the toolset uses of `turn.mcp` (mcp_servers.TurnMcp)."""

    async def list_tools(self) -> list[McpTool]: ...

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> McpToolResult: ...

    async def call_quietly(
        self, name: str, arguments: dict[str, Any] | None = None
    ) -> McpToolResult: ...


class McpToolset(AbstractToolset[Any]):
    """Every tool of the session's connected MCP servers, named `<server>_<tool>`."""

    def __init__(self, mcp: McpTools, *, show: bool = False) -> None:
        self._mcp = mcp
        self._show = show

    @property
    def id(self) -> str | None:
        return "acp-mcp"

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools: dict[str, ToolsetTool[Any]] = {}
        for t in await self._mcp.list_tools():
            schema = t.input_schema or {"type": "object", "properties": {}}
            tools[t.name] = ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=t.name,
                    description=t.description,
                    parameters_json_schema=schema,
                    metadata={"mcp_server": t.server, "mcp_tool": t.tool},
                ),
                max_retries=MAX_RETRIES,
                args_validator=_ARGS,
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        try:
            if self._show:
                result = await self._mcp.call(name, tool_args)
            else:
                result = await self._mcp.call_quietly(name, tool_args)
        except McpToolError as exc:
            raise ToolFailed(str(exc)) from None
        if result.is_error:
            raise ToolFailed(bounded(result.text() or f"the tool {name!r} failed"))
        if result.structured is not None:
            return result.structured
        return result.text()


__all__ = ["McpToolset"]
