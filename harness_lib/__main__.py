import signal
import sys


def _early(signum, frame):  # Ctrl-C or SIGTERM while Python is still importing: exit quietly, no traceback
    sys.exit(128 + signum)


signal.signal(signal.SIGINT, _early)
signal.signal(signal.SIGTERM, _early)

from .cli import main  # noqa: E402 - the handlers above must be in place before the imports start

raise SystemExit(main())
