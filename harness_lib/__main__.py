import _signal  # the C module: ``signal`` would import enum first, a window a Ctrl-C could land in
import sys


def _early(signum, frame):  # Ctrl-C or SIGTERM while Python is still importing: exit quietly, no traceback
    sys.exit(128 + signum)


_signal.signal(_signal.SIGINT, _early)
_signal.signal(_signal.SIGTERM, _early)

from .cli import main  # noqa: E402 - the handlers above must be in place before the imports start

raise SystemExit(main())
