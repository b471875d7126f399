"""The chapter layer: one module per notebook (``s00_scripted_provider`` ... ``s14_libraries``), each
holding what its notebook does not show (experiments behind its tables, its plots, its stories in words);
``common`` for what they share; the chapter's published figures and the side-by-side comparison
(``figures``), the report (``report``), the notebooks' parameters and Stop button. The core never imports
this package; this package imports both sides."""

from .cells import one_line_stubs as _one_line_stubs

_one_line_stubs()   # in a kernel: a stub, and a cell that fails for want of one, say so in one line
