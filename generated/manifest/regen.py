"""Regenerate agentgen's own generated modules from its inputs (the dogfood).

    .venv/bin/python generated/manifest/regen.py           # rewrite them
    .venv/bin/python generated/manifest/regen.py --check   # exit 1 if any is stale

Writes `generator/manifest/format_models.py` (imported by agentgen to read manifests)
and its copy `generated/manifest/format_models.py` from schema/manifest.schema.json, and
`generated/examples/<name>/manifest_models.py` from each examples/<name>/agent.yaml.
tests/generator/test_generated_drift.py runs the same comparison.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main(argv: list[str]) -> int:
    from generator.manifest.models import dogfood_outputs

    check = "--check" in argv
    if not check:
        # the format models first: the examples are read through them, so a format
        # change must be in place (and imported afresh) before their models are made
        from generator.manifest.format import FORMAT_MODULE, format_models_source

        fmt = format_models_source()
        if FORMAT_MODULE.read_text(encoding="utf-8") != fmt:
            FORMAT_MODULE.write_text(fmt, encoding="utf-8")
            os.execv(sys.executable, [sys.executable, __file__, *argv])
    stale = []
    for path, text in dogfood_outputs(REPO).items():
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path.relative_to(REPO).as_posix())
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for rel in stale:
        print(("stale: " if check else "wrote: ") + rel)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
