"""``nbformat``, imported without compiling grammars it never uses.

Importing nbformat imports jsonschema, whose format checkers import ``rfc3987_syntax`` when it is installed
(Jupyter's server installs it): that import builds 38 lark parsers, 1.5 to 2 s of CPU in every process that
reads or writes a notebook (``make chapter`` has two), for the ``iri`` formats no notebook schema names.
``from .nbformat_fast import nbformat`` imports nbformat with that one module hidden, then unhides it: a
later ``import rfc3987_syntax`` in the same process works as usual. When jsonschema is already imported,
nothing is hidden (it has its checkers already).
"""

from __future__ import annotations

import sys

_hide = "jsonschema" not in sys.modules and "rfc3987_syntax" not in sys.modules
if _hide:
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # import raises ImportError: not installed
try:
    import nbformat
finally:
    if _hide:
        del sys.modules["rfc3987_syntax"]

__all__ = ["nbformat"]
