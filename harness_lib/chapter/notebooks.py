"""Execute the notebooks in place, headless, so that their stored outputs are fresh.

    python -m harness_lib.chapter.notebooks                  # every notebooks/*.ipynb
    python -m harness_lib.chapter.notebooks notebooks/01-loop.ipynb

That command is the maintainer's, for a notebook just changed (``make notebooks`` refreshes them all, with the
report and the translations; ``make chapter`` executes copies, never these). Notebook 12's recorded live section is
kept unless the local model ran (``s12_local_model.keep_recorded_live``).

Each notebook runs in its own ``python3`` kernel with ``notebooks/`` as its working directory. Outputs are
kept; what changes on every run without meaning anything (execution timestamps, widget state) is not
written, so re-executing an unchanged notebook changes only what its code really computed anew. A widget's
output keeps its other forms, not its view: the model the view points to lives in the kernel that ran it, and
JupyterLab shows "Error displaying widget: model not found" for it in a notebook just opened, where the text says to
run the cell (and a slider's HTML form shows the plot it drew, ``sliders.Slider``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from .nbformat_fast import nbformat

# Relative: the project's notebooks are not part of the installed package; run from the project's folder.
NOTEBOOKS = Path("notebooks")
KEEP_NOTEBOOK_METADATA = ("kernelspec", "language_info", "harness_lib")   # the last: a translation's stamp
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"   # a live widget: its model is the kernel's, not the file's


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
        for output in cell.get("outputs", []):
            if WIDGET_VIEW in output.get("data", {}) and len(output["data"]) > 1:   # its text (and HTML) stay
                del output["data"][WIDGET_VIEW]
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
    from nbclient import NotebookClient  # here: it imports nbformat, which must come from nbformat_fast first

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    with _kernel(kernel_name) as km:
        client = NotebookClient(nb, km=km, timeout=timeout, kernel_name=kernel_name, record_timing=False,
                                resources={"metadata": {"path": str(path.parent.resolve())}})
        _CLIENTS.add(client)
        try:
            client.execute()
        finally:
            _CLIENTS.discard(client)
            # nbclient registers a kernel cleanup to run at exit, and leaves it registered when the kernel dies as it
            # starts (stopped by Ctrl-C, say); at exit it then failed on the kernel manager it had let go of, with a
            # traceback. The kernel is this function's to stop (``_kernel``): the client's cleanup goes.
            atexit.unregister(client._cleanup_kernel)
    seconds = time.perf_counter() - started
    nb.metadata["kernelspec"] = kernelspec(kernel_name)
    nbformat.write(strip(nb), path)
    return seconds


_RUNNING: set = set()   # the kernel managers of the notebooks executing now (execute_all stops them on Ctrl-C)
_CLIENTS: set = set()   # and their nbclient clients, each with a cleanup registered to run at exit (see execute_all)


@contextlib.contextmanager
def _kernel(kernel_name: str):
    """A kernel manager whose kernel talks over local sockets in a private folder (POSIX), not TCP: the kernel
    then has no reason to warn, once a notebook, that TCP is unencrypted. The kernel is shut down on the way out
    (a kernel manager handed to nbclient is the caller's to stop)."""
    from jupyter_client.manager import KernelManager

    with tempfile.TemporaryDirectory(prefix="harness-kernel-") as sockets:
        km = (KernelManager(kernel_name=kernel_name, transport="ipc", ip=str(Path(sockets) / "kernel"))
              if os.name == "posix" else KernelManager(kernel_name=kernel_name))
        _RUNNING.add(km)
        try:
            yield km
        finally:
            _RUNNING.discard(km)
            if km.has_kernel:
                km.shutdown_kernel(now=True)


def every_notebook(folder: Path = NOTEBOOKS) -> list[Path]:
    """``notebooks/*.ipynb`` (or ``folder``'s), in order (00 first); an error saying where to run from when there
    are none."""
    paths = sorted(Path(folder).glob("*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"no notebooks in {Path(folder).resolve()}: the notebooks come with the project, not "
                                "the installed package; run this from the project's folder")
    return paths


def timing_line(label: str, seconds: float) -> str:
    """One step of ``make chapter`` as it prints it: what ran and how long it took."""
    return f"{label:<32} {seconds:6.1f} s"


# When notebooks run side by side, the two whose figures are times (09's scan and Stop, judged against
# tolerances; 11's latencies) start first, together: each then runs beside the other's waits rather than
# beside another notebook's work, and the longest (09, 16 s, mostly its scans) does not end the run alone.
TIMED_FIRST = ("09-cancellation.ipynb", "11-latency.ipynb")


def execute_all(paths=None, timeout: int = 600, say=None, jobs: int = 1) -> dict[str, float]:
    """Execute ``paths`` (every ``notebooks/*.ipynb`` when None); {notebook name: seconds}, in ``paths``' order.
    ``jobs`` notebooks run at once, each in its own kernel (the ones in ``TIMED_FIRST`` started first); one
    at a time, in order, when ``jobs`` is 1. ``say``, when given, is called with one line per notebook as each
    one ends. A notebook that fails raises once those already running have ended; none is started after it."""
    paths = every_notebook() if paths is None else [Path(p) for p in paths]
    times: dict[str, float] = {}
    failed: list[BaseException] = []

    def one(p: Path) -> None:
        if failed:   # a notebook failed: start no other (those running end on their own)
            return
        try:
            times[p.name] = round(execute(p, timeout=timeout), 1)
        except BaseException as e:
            failed.append(e)
            raise
        if say:
            say(timing_line(p.name, times[p.name]))

    if jobs <= 1 or len(paths) <= 1:
        for p in paths:
            one(p)
        return times
    order = sorted(paths, key=lambda p: TIMED_FIRST.index(p.name) if p.name in TIMED_FIRST else len(TIMED_FIRST))
    queue, taking = list(order), threading.Lock()

    def worker() -> None:
        while True:
            with taking:
                if failed or not queue:
                    return
                p = queue.pop(0)
            try:
                one(p)
            except BaseException:   # kept in failed, raised by the caller
                return

    # Daemon threads: a notebook's client, its kernel shut down under it, can wait on the kernel for ever (a
    # blocking read without a timeout, which only a signal to its own thread would break): Ctrl-C must not wait.
    threads = [threading.Thread(target=worker, name=f"notebook-{i}", daemon=True) for i in range(jobs)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)   # with a timeout: a Ctrl-C landing just before a wait without one went unheard
    except BaseException as e:   # Ctrl-C, a signal: start no other notebook, stop the kernels running
        failed.append(e)
        _stop_kernels()
        deadline = time.monotonic() + 2
        for t in threads:   # those that hear their kernel end, end; the others are left to the exit
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))
        # Again: a kernel that was being started when Ctrl-C came had no process to stop yet, and its thread went
        # on to start it. Left running, it outlived this process and failed once the exit removed its sockets'
        # folder, with a traceback on the reader's terminal.
        _stop_kernels()
        # A client whose thread is left to the exit keeps the cleanup nbclient registered with atexit, which would
        # run at exit on a kernel manager it may have let go of already, and print a traceback: the kernels are
        # stopped above, so that cleanup has nothing left to do, now or if its thread registers it later.
        for client in list(_CLIENTS):
            atexit.unregister(client._cleanup_kernel)
            client._cleanup_kernel = _nothing
        raise
    if failed:
        raise failed[0]
    return {p.name: times[p.name] for p in paths}


def _stop_kernels() -> None:
    """Stop the kernel of every notebook executing now (one not started yet has nothing to stop)."""
    for km in list(_RUNNING):
        with contextlib.suppress(Exception):
            if km.has_kernel:
                km.shutdown_kernel(now=True)


def _nothing() -> None:
    """A stopped notebook's client's cleanup at exit (execute_all): its kernel was stopped already."""


JOBS_ENV = "HARNESS_CHAPTER_JOBS"


def default_jobs() -> int:
    """Notebooks ``make chapter`` runs at once: ``HARNESS_CHAPTER_JOBS`` when set (1: one after another), else
    two, one per core, on a machine with two cores or more."""
    value = os.environ.get(JOBS_ENV, "").strip()
    if not value:
        return min(2, os.cpu_count() or 1)
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{JOBS_ENV}={value!r}: the number of notebooks run at once, a whole number from 1")
    return int(value)


def main(argv: list[str] | None = None) -> int:
    from .s12_local_model import NOTEBOOK, keep_recorded_live

    argv = sys.argv[1:] if argv is None else argv
    paths = [Path(p) for p in argv] or every_notebook()
    recorded = {p: p.read_text(encoding="utf-8") for p in paths if p.name == NOTEBOOK}
    times = execute_all(paths, say=lambda line: print(line, flush=True))
    for path, text in recorded.items():   # the only record of a real model's run, unless the model ran now
        if keep_recorded_live(path, text):
            print(f"{path}: the local model did not run here: its recorded live section kept")
    print(timing_line("total", sum(times.values())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
