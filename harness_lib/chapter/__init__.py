"""The chapter layer: one module per notebook (``s00_scripted_provider`` ... ``s14_libraries``), each
holding what its notebook does not show (experiments behind its tables, its plots, its stories in words);
``common`` for what they share; the chapter's published figures and the side-by-side comparison
(``figures``), the report (``report``), the notebooks' parameters and Stop button. The core never imports
this package; this package imports both sides."""
