"""Execute the notebooks in place, headless, so that their stored outputs are fresh.

    python -m harness_lib.chapter.notebooks                  # every notebooks/*.ipynb
    python -m harness_lib.chapter.notebooks notebooks/01-loop.ipynb

Each notebook runs in its own ``python3`` kernel with ``notebooks/`` as its working directory. Outputs are
kept; what changes on every run without meaning anything (execution timestamps, widget state) is not
written, so re-executing an unchanged notebook changes only what its code really computed anew.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

# Relative: the project's notebooks are not part of the installed package; run from the project's folder.
NOTEBOOKS = Path("notebooks")
KEEP_NOTEBOOK_METADATA = ("kernelspec", "language_info")
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled")


def strip(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop volatile metadata (timestamps, widget state); keep outputs.

    ``language_info`` is kept whole, as the kernel reported it (the Python version included): JupyterLab
    writes the kernel's ``language_info`` into a notebook as it opens, and one that differs marks the
    notebook unsaved before the reader has touched it."""
    for key in list(nb.metadata):
        if key not in KEEP_NOTEBOOK_METADATA:
            del nb.metadata[key]
    for cell in nb.cells:
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
    return nb


def kernelspec(kernel_name: str = "python3") -> dict:
    """The notebook metadata of the kernel the environment installed. JupyterLab replaces a kernelspec
    whose display name differs (``Python 3`` for ``Python 3 (ipykernel)``), which marks the notebook
    unsaved the moment it opens, before the reader has touched it."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(kernel_name)
    return {"display_name": spec.display_name, "language": spec.language, "name": kernel_name}


def execute(path: str | Path, timeout: int = 600, kernel_name: str = "python3") -> float:
    """Execute one notebook in place; returns its wall time in seconds. Raises if a cell fails."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name=kernel_name, record_timing=False,
                   resources={"metadata": {"path": str(path.parent.resolve())}}).execute()
    seconds = time.perf_counter() - started
    nb.metadata["kernelspec"] = kernelspec(kernel_name)
    nbformat.write(strip(nb), path)
    return seconds


def every_notebook() -> list[Path]:
    """``notebooks/*.ipynb``, in order (00 first); an error saying where to run from when there are none."""
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"no notebooks in {NOTEBOOKS.resolve()}: the notebooks come with the project, not "
                                "the installed package; run this from the project's folder")
    return paths


def execute_all(paths=None, timeout: int = 600) -> dict[str, float]:
    """Execute ``paths`` (every ``notebooks/*.ipynb`` when None) in order; {notebook name: seconds}."""
    paths = every_notebook() if paths is None else [Path(p) for p in paths]
    return {p.name: round(execute(p, timeout=timeout), 1) for p in paths}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    times = execute_all(argv or None)
    for name, seconds in times.items():
        print(f"{name:<32} {seconds:6.1f} s")
    print(f"{'total':<32} {sum(times.values()):6.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
