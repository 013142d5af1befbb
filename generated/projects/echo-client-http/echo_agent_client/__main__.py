"""Run the client against an agent: `echo-agent-client` --url URL."""

from __future__ import annotations

from ._generated import run_client
from .handlers import Client


def main(argv: list[str] | None = None) -> None:
    run_client(Client, argv, transport="http")


if __name__ == "__main__":
    main()
