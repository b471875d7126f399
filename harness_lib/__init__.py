"""Companion harness for "Build an agent harness: the loop and its five exits".

The public API, each name defined in one module and found here as well::

    from harness_lib import Options, Trace, new_run, run

    state = await run(new_run(system, task, model="plan"), tools, Options(base_url=url, max_turns=20))

=================  ===========================  ====================================================
name               defined in                   what it is
=================  ===========================  ====================================================
``run``            ``harness_lib.loop``         the loop: a run to its end, one of five exits
``Options``        ``harness_lib.options``      what the loop is given: its limits and its model
``RunState``       ``harness_lib.state``        a run: plain, saved, resumed
``new_run``        ``harness_lib.state``        a new run from a system prompt and a task
``load``           ``harness_lib.state``        a saved run from its folder
``approve``        ``harness_lib.state``        let a call that waits for approval run
``reject``         ``harness_lib.state``        refuse it, in words the model reads
``Tool``           ``harness_lib.tools``        a tool: a name, a schema, a function
``Trace``          ``harness_lib.trace``        the JSONL trace, in the chapter's vocabulary
``Pricing``        ``harness_lib.pricing``      prices per million tokens
``stops``          ``harness_lib.stops``        stop conditions (a module: ``stops.max_turns(8)``)
``ChatModel``      ``harness_lib.client``       what the loop talks to (any ``complete`` method)
``FakeModel``      ``harness_lib.testing``      a model you script, for tests, without HTTP
=================  ===========================  ====================================================

Each is imported when first asked for (PEP 562): ``import harness_lib`` imports none of them, so the
command line (``python -m harness_lib``) starts without the HTTP client or the tokenizer it does not need.
"""

from __future__ import annotations

import os as _os
import sys as _sys


def _early(signum, frame):
    """Ctrl-C or SIGTERM while Python is still importing the harness (nothing has been done yet), or once
    ``main`` has returned (everything is saved): leave at once with 128 + signum, quietly. Raising would not
    do: an exception raised inside an import can surface wrapped in another, as a traceback."""
    for stream in (_sys.stdout, _sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a stream interrupted mid-write: what is lost was not yet shown
            pass
    _os._exit(128 + signum)


def _run_as_the_command_line() -> bool:
    """True while Python, started as ``python -m harness_lib``, imports this package to find the command line
    (``sys.argv[0]`` is "-m" until it has found it): from here on a Ctrl-C is ``_early``'s, not a traceback out of
    this file's imports. An import of the package by anything else changes no signal handler."""
    if _sys.argv[:1] != ["-m"]:
        return False
    args = iter(getattr(_sys, "orig_argv", [])[1:])
    for arg in args:  # Python's own options come first
        if arg.startswith("-m"):
            return (arg[2:] or next(args, "")) == "harness_lib"
        if arg in ("-X", "-W"):
            next(args, None)  # their value
        elif not arg.startswith("-"):
            return False
    return False


if _run_as_the_command_line():
    import _signal  # type: ignore[import-not-found]  # the C module: ``signal`` would import enum first
    _signal.signal(_signal.SIGINT, _early)
    _signal.signal(_signal.SIGTERM, _early)

import importlib  # noqa: E402 - after the handlers: a Ctrl-C landing in these imports is theirs
from typing import TYPE_CHECKING  # noqa: E402

__version__ = "0.1.0"

__all__ = ["run", "Options", "RunState", "new_run", "load", "approve", "reject", "Tool", "Trace", "Pricing", "stops",
           "ChatModel", "FakeModel"]

# name -> the module that defines it, the one place it is written (None: the name is a module itself)
_HOME = {"run": "loop", "Options": "options", "RunState": "state", "new_run": "state", "load": "state",
         "approve": "state", "reject": "state", "Tool": "tools", "Trace": "trace", "Pricing": "pricing",
         "stops": None, "ChatModel": "client", "FakeModel": "testing"}

if TYPE_CHECKING:  # what a type checker and an editor see; at run time, __getattr__ below
    from . import stops
    from .client import ChatModel
    from .loop import run
    from .options import Options
    from .pricing import Pricing
    from .state import RunState, approve, load, new_run, reject
    from .testing import FakeModel
    from .tools import Tool
    from .trace import Trace


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = _HOME[name]
    value = importlib.import_module(f".{home or name}", __name__)
    if home is not None:
        value = getattr(value, name)
    globals()[name] = value  # asked once: an attribute from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
