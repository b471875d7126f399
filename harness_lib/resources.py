"""The package's own data, ``harness_lib/data/``, found through ``importlib.resources``.

One place that knows where the data is, so it is found the same way from an editable install, an
installed wheel, and a notebook or a command run from any folder: the workspace every run copies,
the chapter's published figures, its trace and its local-model table. pyproject.toml declares the
files as package data. Nothing here writes: the package never writes into its own folder.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_path(*parts: str, must_exist: bool = True) -> Path:
    """``harness_lib/data/<parts>`` as a path on disk (``data_path()`` is the folder itself).

    Raises ValueError for a part that would leave the data folder, FileNotFoundError when the file is
    not there (an incomplete install; ``must_exist=False`` for a path only compared with, never read),
    and RuntimeError when the package is not on the file system (imported from a zip archive), where the
    workspace could not be copied from."""
    for part in parts:
        if not isinstance(part, str) or not part or Path(part).is_absolute() or ".." in Path(part).parts:
            raise ValueError(f"not a name inside harness_lib/data: {part!r}")
    root = resources.files(__package__).joinpath("data")
    if not isinstance(root, Path):
        raise RuntimeError(f"harness_lib is not installed as files on disk ({root}); install it with pip")
    target = root.joinpath(*parts).resolve()
    if must_exist and not target.exists():
        shown = "/".join(("harness_lib", "data") + parts)
        raise FileNotFoundError(f"{shown} is missing from the installed package at {root}: reinstall harness-lib")
    return target
