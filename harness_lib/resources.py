"""The project's data, ``data/``, found through ``importlib.resources``: the one place that knows where it is.

The data sits at the top of the project, beside ``harness_lib/``, ``notebooks/`` and ``tests/``: the workspace
every run copies, the chapter's published figures, its trace and its local-model table. A wheel carries it
inside the package, as ``harness_lib/data/`` (pyproject.toml maps ``data/`` there at build time), so it is
found the same way from an installed wheel, an editable install, a checkout, and a notebook or a command
run from any folder:

* installed from a wheel: ``harness_lib/data/``, the package's own folder;
* a source tree (a checkout, an editable install, which imports ``harness_lib/`` where it lies): the
  ``data/`` beside the package.

Nothing here writes: the package never writes into its own folder, nor into the project's.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _root() -> tuple[Path, str, str]:
    """(the data folder, how a message names it, what fixes a missing file)."""
    package = resources.files(__package__)
    if not isinstance(package, Path):
        raise RuntimeError(f"harness_lib is not installed as files on disk ({package}); install it with pip")
    installed = package / "data"
    if installed.is_dir():
        return installed, "harness_lib/data", "reinstall harness-lib"
    return package.parent / "data", "data", "restore it (git checkout -- data)"


def data_path(*parts: str, must_exist: bool = True) -> Path:
    """``data/<parts>`` as a path on disk (``data_path()`` is the folder itself).

    Raises ValueError for a part that would leave the data folder, FileNotFoundError when the file is
    not there (an incomplete install or checkout; ``must_exist=False`` for a path only compared with, never
    read), and RuntimeError when the package is not on the file system (imported from a zip archive), where
    the workspace could not be copied from."""
    for part in parts:
        if not isinstance(part, str) or not part or Path(part).is_absolute() or ".." in Path(part).parts:
            raise ValueError(f"not a name inside the data folder: {part!r}")
    root, named, fix = _root()
    target = root.joinpath(*parts).resolve()
    if must_exist and not target.exists():
        where = "the installed package" if named.startswith("harness_lib") else "the project"
        shown = "/".join((named,) + parts)
        raise FileNotFoundError(f"{shown} is missing from {where} at {root}: {fix}")
    return target
