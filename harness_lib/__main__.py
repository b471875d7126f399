import _signal  # the C module: ``signal`` would import enum first, a window a Ctrl-C could land in

from . import _early  # in place since the package's first lines when Python was started as `python -m harness_lib`

_signal.signal(_signal.SIGINT, _early)
_signal.signal(_signal.SIGTERM, _early)

from .cli import main  # noqa: E402 - the handlers above must be in place before the imports start

code = main()
_signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # from here on, a signal is let go, not raised into the
_signal.signal(_signal.SIGTERM, _signal.SIG_IGN)  # interpreter's own shutdown
raise SystemExit(code)
