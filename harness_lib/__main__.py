import _signal  # the C module: ``signal`` would import enum first, a window a Ctrl-C could land in
import os
import sys


def _early(signum, frame):
    """Ctrl-C or SIGTERM while Python is still importing the harness (nothing has been done yet), or once
    ``main`` has returned (everything is saved): leave at once with 128 + signum, quietly. Raising would not
    do: an exception raised inside an import can surface wrapped in another, as a traceback."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a stream interrupted mid-write: what is lost was not yet shown
            pass
    os._exit(128 + signum)


_signal.signal(_signal.SIGINT, _early)
_signal.signal(_signal.SIGTERM, _early)

from .cli import main  # noqa: E402 - the handlers above must be in place before the imports start

code = main()
_signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # from here on, a signal is let go, not raised into the
_signal.signal(_signal.SIGTERM, _signal.SIG_IGN)  # interpreter's own shutdown
raise SystemExit(code)
