"""The chapter layer: one function per chapter table, the chapter's published figures, the side-by-side
comparison, and the plots. The core never imports this package; this package imports both sides."""
