"""The one call into datamodel-code-generator (pinned exactly in pyproject.toml).

Protocol models (`protocol/models.py`) and manifest models (`manifest/datamodel.py`)
both come through `run`: the options every agentgen module shares, the generator's
warnings kept off the user's terminal, and any failure of the generator on a schema
turned into one located AgentgenError, never a traceback.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

from .errors import AgentgenError


def run(
    schema: Any, *, source: str, pointer: str | None = None, hint: str | None = None, **options: Any
) -> Any:
    """`datamodel_code_generator.generate(schema, ...)` with the shared options; `options`
    add to or override them. Returns what `generate` returns."""
    from datamodel_code_generator import InputFileType, PythonVersion, generate
    from datamodel_code_generator.enums import DataModelType

    shared: dict[str, Any] = {
        "input_file_type": InputFileType.JsonSchema,
        "output_model_type": DataModelType.PydanticV2BaseModel,
        "target_python_version": PythonVersion.PY_311,
        "snake_case_field": True,
        "use_annotated": True,
        "field_constraints": True,
        "disable_timestamp": True,
    }
    try:
        from . import console

        with warnings.catch_warnings(), console.status(f"generating models from {source}"):
            warnings.simplefilter("ignore")
            return generate(schema, **{**shared, **options})
    except AgentgenError:
        raise
    except Exception as exc:  # noqa: BLE001 - the generator's own failure: one located line
        text = str(exc).strip()
        detail = text.splitlines()[0][:300] if text else type(exc).__name__
        raise AgentgenError(
            f"datamodel-code-generator could not turn the schema into models: {detail}",
            source=source,
            pointer=pointer,
            hint=hint,
        ) from None


def _ruff() -> str:
    return shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")


def ruff_version() -> str:
    """`ruff --version` of the ruff `ruff_format` runs (what the models cache is keyed by)."""
    proc = subprocess.run([_ruff(), "--version"], capture_output=True, check=False)
    return proc.stdout.decode(errors="replace").strip() or f"ruff exit {proc.returncode}"


def ruff_format(source: str, filename: str = "generated.py") -> str:
    """`source` formatted by ruff (line length 100), as every generated file is."""
    ruff = _ruff()
    proc = subprocess.run(
        [ruff, "format", "--line-length", "100", "--stdin-filename", filename, "-"],
        input=source.encode(),
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise AgentgenError(
            f"ruff could not format {filename}: {proc.stderr.decode(errors='replace')[:500]}"
        )
    return proc.stdout.decode()
