"""What a notebook's cell shows when it fails for want of a piece not written yet: one line, not a traceback.

In an exercise, a cell that calls a piece still a stub raises ``NotImplementedError`` from the reader's own cell:
one line naming the piece to write. The cells after it then fail in turn, for want of what it would have made (a
``NameError`` for a variable it never set, a ``KeyError`` in a table it left half full, a file it never wrote).
While a piece this kernel has seen unwritten is still that same stub (its cell not run again since), such a failure
in a cell's own code (its top level, or a comprehension there) is one line too, naming the piece to write
first. A failure inside a function of the reader's,
or in a kernel where every stub seen is written, is the usual traceback.

``one_line_stubs()`` installs this in the kernel it runs in (``harness_lib.chapter`` calls it on import); outside
a kernel it does nothing.
"""

from __future__ import annotations

import traceback
import types

from .language import N_, _
from .plain import one_line

NOT_WRITTEN = N_("not written yet: write `{name}` in its cell above, where it says YOUR CODE HERE")
# TRANSLATORS: {error}: the error as Python names it ("NameError: name 'events' is not defined"); {name}: a function
CASCADE = N_("{error}: a cell above could not run, because `{name}` is not written yet; write it where it says YOUR "
             "CODE HERE, then run the cells again")

CASCADES = (NameError, LookupError, FileNotFoundError)   # what a cell meets when one above it did not run
_UNWRITTEN: dict[str, types.CodeType] = {}   # a stub seen raising: its name, and its code (to tell it is still it)


def _cell_prefix(shell) -> str:
    """How the kernel names a cell's code (``/tmp/ipykernel_123/`` in ipykernel, ``<ipython-input-`` in IPython)."""
    name = shell.compile.get_code_name("", "", 0) if hasattr(shell.compile, "get_code_name") else "<ipython-input-"
    return name.rsplit("/", 1)[0] + "/" if "/" in name else name[:15]


def _still_unwritten(shell) -> str | None:
    """The first stub seen that is still the one seen: its code still a function's or a method's of the cells."""
    if not _UNWRITTEN:
        return None
    codes = set()
    for value in list(shell.user_ns.values()):
        if isinstance(value, types.FunctionType):
            codes.add(value.__code__)
        elif isinstance(value, type):
            for member in list(vars(value).values()):
                member = member.fget if isinstance(member, property) else member
                if isinstance(member, types.FunctionType):
                    codes.add(member.__code__)
    inner = list(codes)
    while inner:   # a function defined inside one (a tool's run)
        inner = [c for code in inner for c in code.co_consts if isinstance(c, types.CodeType)]
        codes.update(inner)
    for name, code in list(_UNWRITTEN.items()):
        if code in codes:
            return name
        del _UNWRITTEN[name]   # its cell has run again: written, or a stub that will say so itself
    return None


def _one_line(shell, etype, value, tb, tb_offset=None):
    """IPython's handler for a cell's exception: a stub's, or a failure for want of one, in one line; anything else
    as IPython shows it."""
    prefix = _cell_prefix(shell)
    cell = [frame for frame, _line in traceback.walk_tb(tb) if frame.f_code.co_filename.startswith(prefix)]
    innermost = cell[-1].f_code if cell else None
    if etype is NotImplementedError and innermost is not None and innermost.co_name != "<module>" \
            and not value.args:
        _UNWRITTEN.setdefault(innermost.co_name, innermost)
        stb = ["NotImplementedError: " + _(NOT_WRITTEN).format(name=innermost.co_name)]
    elif issubclass(etype, CASCADES) and innermost is not None and innermost.co_name.startswith("<") \
            and (stub := _still_unwritten(shell)):   # the cell's own code: <module>, or a comprehension in it
        stb = [_(CASCADE).format(error=one_line(value), name=stub)]
    else:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None
    shell._showtraceback(etype, value, stb)
    return stb


def one_line_stubs() -> None:
    """In a kernel, install ``_one_line`` for a cell's exceptions (unless something else already has); elsewhere,
    nothing."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with jupyterlab
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "_showtraceback") and not shell.custom_exceptions:
        shell.set_custom_exc((Exception,), _one_line)


__all__ = ["CASCADE", "NOT_WRITTEN", "one_line_stubs"]
