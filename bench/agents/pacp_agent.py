"""ACP Kit (pydantic-acp 1.10.0) serving the scripted model of bench/agents/model_script.py
over stdio: the peer of bench/bench_model.py (run in a venv that has pydantic-acp)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from model_script import make_agent  # noqa: E402
from pydantic_acp import run_acp  # noqa: E402

run_acp(make_agent())
