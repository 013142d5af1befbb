"""The ACP registry (agentclientprotocol/registry): how editors find an agent.

`rules.py` holds the registry's published rules (FORMAT.md, agent.schema.json and the
icon rules of the ACP RFD "acp-agent-registry"), implemented here; `entry.py` builds a
project's `acp-registry/<id>/agent.json` and placeholder icon from its manifest;
`check.py` is `agentgen registry check` (with `--launch`: `launch.py`).
"""
