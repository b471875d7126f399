"""The reader's run of the chapter: what ``make chapter`` executes and writes, in ``executed/`` (ignored by git).
It never writes a tracked file: the committed notebooks and ``reports/`` are the reference, refreshed only by the
maintainer's ``make notebooks`` (``harness_lib.chapter.refresh``), which runs the same way and then puts the run's
files over the committed ones (``install_reference``) instead.

    executed/notebooks/          the notebooks as your last `make chapter` ran them, bg/ and hu/ too (`make lab`)
    executed/reports/chapter.md  its report (and chapter.csv)
    executed/run.json            what it wrote (each file's sha256), when, and from which committed notebooks

A run (``run``) takes ``executed/.lock`` (``flock``: a second ``make chapter`` in the same folder refuses at once,
naming the first), copies ``notebooks/`` into ``executed/.staging/`` and hands that copy over: the notebooks are
executed there, the report and the translated notebooks written beside them. Only once all of it succeeded does
``install`` move each file into ``executed/notebooks`` and ``executed/reports``, Ctrl-C held off for those renames.
A run stopped before that (Ctrl-C, a failed notebook, a full disk) leaves the last run's files as they were; its
staging folder is removed on the way out, or by the next run. Nothing the reader made is lost: a file of
``executed/`` that the reader changed since ``make chapter`` wrote it (a notebook edited and saved in JupyterLab)
is kept beside the new one as ``NAME.edited.ipynb``, and a file ``make chapter`` did not write is left alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

# Relative, as in harness_lib.chapter.notebooks: the project's folder, where `make chapter` runs.
FOLDER = Path("executed")
NOTEBOOKS, REPORTS = "notebooks", "reports"
PARTS = (NOTEBOOKS, REPORTS)
RECORD = "run.json"
STAGING, LOCK = ".staging", ".lock"
# What JupyterLab writes beside the notebooks: never copied into a run, never taken for a file of the run.
NOT_COPIED = (".ipynb_checkpoints", ".virtual_documents", "__pycache__")


@dataclass
class Stage:
    """A run under way: ``root`` holds ``notebooks/`` (a copy of the committed ones, executed there) and
    ``reports/``; ``sources``, the sha256 of each committed notebook file it was copied from."""

    root: Path
    folder: Path
    sources: dict = field(default_factory=dict)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(folder: Path) -> list[Path]:
    """Every file under ``folder``, relative to it, but what JupyterLab writes beside the notebooks."""
    if not folder.is_dir():
        return []
    return sorted(p.relative_to(folder) for p in folder.rglob("*")
                  if p.is_file() and not set(p.relative_to(folder).parts) & set(NOT_COPIED))


def read_record(folder: Path = FOLDER) -> dict:
    """``executed/run.json``, or {} when there is none or it cannot be read (then every file of ``executed/`` counts
    as the reader's own, and is kept)."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) and isinstance(record.get("written"), dict) else {}


@contextlib.contextmanager
def _locked(folder: Path):
    """``folder/.lock``, held for the run: another process holding it is refused at once, in one line."""
    path = folder / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "another process"
            raise OSError(errno.EBUSY, f"another `make chapter` is running in this folder ({holder}): wait for it "
                                       "to end, or stop it", str(path)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, since {time.strftime('%H:%M:%S')}".encode())
        yield
    finally:
        os.close(fd)   # the lock goes with it


@contextlib.contextmanager
def run(project: Path = Path("."), notebooks: Path = Path("notebooks")):
    """A run of the chapter in ``project/executed/.staging`` (a ``Stage``), the committed notebooks copied there;
    the staging folder is removed on the way out, whatever happens. ``install`` makes the run the reader's."""
    folder = project / FOLDER
    source = project / notebooks
    folder.mkdir(exist_ok=True)
    with _locked(folder):
        staging = folder / STAGING
        shutil.rmtree(staging, ignore_errors=True)   # a run killed before it could remove its own
        try:
            shutil.copytree(source, staging / NOTEBOOKS, ignore=shutil.ignore_patterns(*NOT_COPIED))
            (staging / REPORTS).mkdir()
            copied = staging / NOTEBOOKS   # hashed before anything runs in it: what this run started from
            sources = {(Path(NOTEBOOKS) / p).as_posix(): sha256(copied / p) for p in _files(copied)}
            yield Stage(staging, folder, sources)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C and SIGTERM held off until the block ends (then acted on): a few renames are not left half-done.
    Python runs signal handlers in the main thread only; elsewhere the block runs as it is."""
    got: list[int] = []
    try:
        old = {s: signal.signal(s, lambda n, _frame: got.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:   # not the main thread
        yield
        return
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)   # None: a handler set outside Python
        if got:
            signal.raise_signal(got[0])


def _aside(path: Path) -> Path:
    """A free name beside ``path`` for the reader's version of it: ``NAME.edited.ipynb``, then ``.edited-2``..."""
    for n in range(1, 1000):
        name = f"{path.stem}.edited{'' if n == 1 else f'-{n}'}{path.suffix}"
        if not (path.parent / name).exists():
            return path.parent / name
    raise OSError(errno.EEXIST, "no free name for the reader's edited copy", str(path))


def install(stage: Stage, summary: str = "") -> list[tuple[Path, Path]]:
    """Move the run's files into ``executed/`` and record them; the reader's edited files kept beside (returned:
    each file's path and the name the reader's version now has). Signals wait until it is done."""
    folder, old = stage.folder, read_record(stage.folder).get("written", {})
    files = [(Path(part) / rel).as_posix() for part in PARTS for rel in _files(stage.root / part)]
    written = {key: sha256(stage.root / key) for key in files}
    record = {"finished": time.strftime("%Y-%m-%d %H:%M:%S"), "summary": summary, "sources": stage.sources,
              "written": written}
    tmp = folder / f".{RECORD}.tmp"   # written first: a full disk stops the run here, before any file has moved
    try:
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    kept = []
    with _signals_held():
        for key in files:
            new, target = stage.root / key, folder / key
            if target.exists() and sha256(target) not in (old.get(key), written[key]):
                kept.append((target, target.rename(_aside(target))))   # the reader's, or changed since written
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(new, target)
        for key in sorted(set(old) - set(written)):   # a file of an earlier run the project no longer has
            target = folder / key
            if target.is_file() and sha256(target) == old[key]:
                target.unlink()
        os.replace(tmp, folder / RECORD)
    return kept


def install_reference(stage: Stage, project: Path = Path(".")) -> list[Path]:
    """The maintainer's refresh: the run's notebooks and report over the committed ones (``project/notebooks``,
    ``project/reports``), each file only if it changed, and a committed notebook file the run removed (a translation
    whose English is gone) removed; the files changed, returned. Signals wait until it is done."""
    changed = []
    gone = [key for key in sorted(stage.sources) if not (stage.root / key).exists()]
    with _signals_held():
        for part in PARTS:
            for rel in _files(stage.root / part):
                new, target = stage.root / part / rel, project / part / rel
                if target.is_file() and target.read_bytes() == new.read_bytes():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(new, target)
                changed.append(target)
        for key in gone:
            if (project / key).is_file():
                (project / key).unlink()
                changed.append(project / key)
    return changed


def current(project: Path = Path("."), notebooks: Path = Path("notebooks")) -> tuple[Path | None, str]:
    """(the reader's executed notebooks, a line saying what they are), or (None, why not) when there are none.
    The line says so when the committed notebooks changed since (a ``git pull``): the copies are then older."""
    folder = project / FOLDER
    record = read_record(folder)
    executed = folder / NOTEBOOKS
    if not record or not any(executed.glob("*.ipynb")):
        return None, "no executed copies yet (`make chapter` writes them)"
    source = project / notebooks
    now = {(Path(NOTEBOOKS) / p).as_posix(): sha256(source / p) for p in _files(source) if p.suffix == ".ipynb"}
    then = {k: v for k, v in record.get("sources", {}).items() if k.endswith(".ipynb")}
    changed = sorted(k.split("/", 1)[1] for k in set(now) | set(then) if now.get(k) != then.get(k))
    line = f"your `make chapter` of {record.get('finished', 'an earlier day')}"
    if changed:
        line += (f"; the committed notebooks changed since ({', '.join(changed[:3])}"
                 f"{', ...' if len(changed) > 3 else ''}): run `make chapter` again to execute them")
    return executed, line
