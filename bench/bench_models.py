"""Model generation benchmark: `generate_models` vs datamodel-codegen alone, one run.

Ours: the whole `agentgen models` work in process (normalisation passes + datamodel-code-
generator + the tagged unions and base + `ruff format`) on the v1 unstable schema.
Peer: datamodel-code-generator alone on the raw schema with comparable options (pydantic
v2, snake_case fields with aliases, Annotated constraints, extra allowed), twice: with its
default formatters (black + isort, what running it alone gives) and with none (the
generator's own work only, the strictest comparison).  Runs alternate; medians of
`--repeat` runs are printed with the ratios (target: ours <= 1.5x the peer).

    .venv/bin/python bench/bench_models.py [--repeat 5] [--schema PATH] [--parse N]

`--parse N` also times parsing session notifications with the generated v1 models against
the official SDK's models (`acp.schema`), a ratio (lower is better for ours).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# the generation itself, each run: not the models cache (`agentgen models` run again on
# the same schema reads its output back from there)
os.environ["AGENTGEN_MODELS_CACHE"] = "off"
sys.path.insert(0, str(ROOT))

DEFAULT_SCHEMA = ROOT.parent / "shared" / "acp" / "v1" / "schema.unstable.json"


def _peer(schema: dict[str, Any], *, formatted: bool) -> str:
    from datamodel_code_generator import DataModelType, InputFileType, PythonVersion, generate

    options: dict[str, Any] = {}
    if not formatted:
        options["formatters"] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = generate(
            schema,
            input_file_type=InputFileType.JsonSchema,
            output_model_type=DataModelType.PydanticV2BaseModel,
            target_python_version=PythonVersion.PY_311,
            disable_timestamp=True,
            snake_case_field=True,
            use_annotated=True,
            field_constraints=True,
            use_union_operator=True,
            use_standard_collections=True,
            use_double_quotes=True,
            allow_population_by_field_name=True,
            allow_extra_fields=True,
            **options,
        )
    return str(out)


def _ours(schema: dict[str, Any]) -> str:
    from agentgen.protocol.models import generate_models

    return generate_models(schema, source_label="bench")


MESSAGES = [
    {
        "sessionId": "sess_1",
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "The forecast for tomorrow is sunny."},
        },
    },
    {
        "sessionId": "sess_1",
        "update": {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "call_7",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "3 passed"}}],
        },
    },
]


def parse_bench(schema: dict[str, Any], n: int) -> None:
    """Parse session notifications: our generated v1 models vs the official SDK's."""
    import importlib.util
    import tempfile

    from acp import schema as sdk
    from agentgen.protocol.models import generate_models

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench_acp_models.py"
        path.write_text(generate_models(schema, source_label="bench"))
        spec = importlib.util.spec_from_file_location("bench_acp_models", path)
        assert spec and spec.loader
        ours = importlib.util.module_from_spec(spec)
        sys.modules["bench_acp_models"] = ours
        spec.loader.exec_module(ours)
    per: dict[str, float] = {}
    for name, cls in (("ours", ours.SessionNotification), ("sdk", sdk.SessionNotification)):
        for m in MESSAGES:
            cls.model_validate(m)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                for m in MESSAGES:
                    cls.model_validate(m)
            best = min(best, time.perf_counter() - t0)
        per[name] = best / (n * len(MESSAGES)) * 1e6
    print(
        f"parse SessionNotification (best of 5 x {n}): ours {per['ours']:.1f} us, "
        f"sdk {per['sdk']:.1f} us, ratio {per['ours'] / per['sdk']:.2f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA)
    ap.add_argument("--parse", type=int, default=0, help="also time N parses vs the SDK")
    args = ap.parse_args()
    schema = json.loads(args.schema.read_text())
    if args.parse:
        parse_bench(json.loads((DEFAULT_SCHEMA.parent / "schema.json").read_text()), args.parse)

    runs: dict[str, list[float]] = {"ours": [], "peer (black+isort)": [], "peer (unformatted)": []}
    jobs = {
        "ours": lambda: _ours(schema),
        "peer (black+isort)": lambda: _peer(schema, formatted=True),
        "peer (unformatted)": lambda: _peer(schema, formatted=False),
    }
    for job in jobs.values():  # warm-up: imports, template caches
        job()
    for _ in range(args.repeat):
        for name, job in jobs.items():
            t0 = time.perf_counter()
            job()
            runs[name].append(time.perf_counter() - t0)

    med = {name: statistics.median(v) for name, v in runs.items()}
    print(f"schema: {args.schema} ({len(schema.get('$defs', {}))} definitions)")
    print(f"median of {args.repeat} runs (seconds):")
    for name, value in med.items():
        print(f"  {name:<22} {value:7.3f}  (min {min(runs[name]):.3f})")
    for peer in ("peer (black+isort)", "peer (unformatted)"):
        print(f"ratio ours / {peer}: {med['ours'] / med[peer]:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
