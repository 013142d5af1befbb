"""Run the agent: `assistant` or `python -m assistant`."""

from __future__ import annotations

from ._generated import run_agent
from .handlers import Agent


def main(argv: list[str] | None = None) -> None:
    run_agent(Agent, argv, transport="stdio")


if __name__ == "__main__":
    main()
