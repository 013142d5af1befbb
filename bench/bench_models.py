"""Model generation benchmark: `generate_models` vs datamodel-codegen alone, one run.

Ours: the whole `agentgen models` work in process (normalisation passes + datamodel-code-
generator + the tagged unions and base + `ruff format`) on the v1 unstable schema.
Peer: datamodel-code-generator alone on the raw schema with comparable options (pydantic
v2, snake_case fields with aliases, Annotated constraints, extra allowed), twice: with its
default formatters (black + isort, what running it alone gives) and with none (the
generator's own work only, the strictest comparison).  Runs alternate; medians of
`--repeat` runs are printed with the ratios (target: ours <= 1.5x the peer).

    .venv/bin/python bench/bench_models.py [--repeat 5] [--schema PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
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
    from generator.protocol.models import generate_models

    return generate_models(schema, source_label="bench")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA)
    args = ap.parse_args()
    schema = json.loads(args.schema.read_text())

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
