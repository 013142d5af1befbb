"""Where agentgen's own data is: the role templates, the runtime and the schema files.

The repository keeps them at its top level (`templates/`, `schema/`). A built wheel
carries them inside the package (the repository's generator/ folder, installed as
`agentgen`), as `agentgen/_data/templates/` and `agentgen/_data/schema/`: setup.py's build step copies them there, so nothing is
committed twice. They are found with `importlib.resources` in an installed agentgen,
and in the checkout's top-level folders for a source checkout or an editable install.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from .errors import AgentgenError

DATA = "_data"  # agentgen/_data/ in a built wheel
CHECKOUT = Path(__file__).resolve().parent.parent


def data_dir(name: str) -> Path:
    """The directory `templates`, `schema` or `examples`, wherever this agentgen is installed."""
    packaged = files(__package__ or "agentgen").joinpath(DATA, name)
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    checkout = CHECKOUT / name
    if checkout.is_dir():
        return checkout
    raise AgentgenError(
        f"agentgen's {name}/ folder is missing from this installation",
        source=str(packaged),
        hint="reinstall acp-agentgen (an installed copy carries it in agentgen/_data/)",
    )
