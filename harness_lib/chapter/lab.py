"""``make lab``: JupyterLab over the notebooks, on 127.0.0.1 only, and offline.

    python -m harness_lib.chapter.lab [en|bg|hu] [JUPYTERLAB OPTION ...]

Run from the project's folder (the Makefile does). It opens the reader's own executed notebooks when ``make chapter``
has written them (``executed/notebooks``, ignored by git), else the committed ones (``notebooks/``), and says which
in its first line (and when the committed notebooks changed since the executed copies were made).
JupyterLab's own settings keep it from reaching the network:

* ``lab/overrides.json`` (the project's, JupyterLab's ``app_settings_dir``) sets the defaults of the notification
  settings: fetch the Jupyter news "Never" (so JupyterLab does not ask "Would you like to get notified about
  official Jupyter news?") and no update check. A reader's own saved settings still win, as with any default;
* on the command line the server has no news feed (``news_url`` None), never checks for updates
  (``NeverCheckForUpdate``) and its extension manager is read-only (it never asks PyPI).

Kernels come from this environment first (``JUPYTER_PATH``), so "python3" is the kernel it installed. A language
other than English opens its folder (``notebooks/bg``, ``notebooks/hu``), the English one folder up. Options
after the language go to JupyterLab as they are (the browser test gives a port, a token and ``--no-browser``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import executed

# Relative, as in harness_lib.chapter.notebooks: the notebooks and the settings are the project's, not the package's.
NOTEBOOKS = Path("notebooks")
SETTINGS = Path("lab")   # lab/overrides.json
LANGUAGES = ("en", "bg", "hu")
OFFLINE = ("--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly")


class LabError(Exception):
    """``make lab`` cannot start as asked: one line that says why."""


def opens(project: Path = Path(".")) -> tuple[Path, str]:
    """(the folder JupyterLab opens, the line that says which notebooks those are): the reader's executed copies
    (``executed/notebooks``, written by ``make chapter``) when there are some, else the committed notebooks."""
    folder = project / NOTEBOOKS
    if not any(folder.glob("*.ipynb")):
        raise LabError(f"no notebooks in {folder.resolve()}: run `make lab` from the project's folder")
    mine, what = executed.current(project, NOTEBOOKS)
    if mine is not None:
        return mine, (f"JupyterLab opens {mine.relative_to(project)}/: the notebooks as {what} (the committed ones "
                      f"are in {NOTEBOOKS}/)")
    return folder, f"JupyterLab opens {NOTEBOOKS}/: the notebooks as committed; {what}"


def command(root: Path, language: str = "en", project: Path = Path("."), options=()) -> list[str]:
    """JupyterLab's command line over ``root``, ``language``'s folder first, with the news and update checks off."""
    if language not in LANGUAGES:
        raise LabError(f"{language!r}: choose one of {', '.join(LANGUAGES)}")
    settings = project / SETTINGS
    if not (settings / "overrides.json").is_file():
        raise LabError(f"{settings.resolve() / 'overrides.json'} is missing: it turns JupyterLab's news and update "
                       "checks off; restore it from git")
    argv = [sys.executable, "-m", "jupyterlab", "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={root.resolve()}",
            "--MappingKernelManager.default_kernel_name=python3", f"--LabApp.app_settings_dir={settings.resolve()}",
            *OFFLINE]
    if language != "en":
        argv.append(f"--LabApp.default_url=/lab/tree/{language}")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")   # a container's root: JupyterLab refuses it otherwise
    return argv + list(options)


def environment() -> dict:
    """This environment's kernels before any others (a user's own "python3" kernelspec may name another Python)."""
    own = str(Path(sys.prefix) / "share" / "jupyter")
    rest = os.environ.get("JUPYTER_PATH", "")
    return {**os.environ, "JUPYTER_PATH": own + (os.pathsep + rest if rest else "")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    language, options = (argv[0], argv[1:]) if argv and not argv[0].startswith("-") else ("en", argv)
    try:
        root, line = opens()
        args = command(root, language, options=options)
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(line, flush=True)
    os.execve(sys.executable, args, environment())   # JupyterLab in this process: Ctrl-C reaches it as before
    return 0   # not reached


if __name__ == "__main__":
    raise SystemExit(main())
