"""The checks of the reader's pieces, one module a section (``s02_turn_cap``...): in a notebook's cell tagged
``check``, ``from harness_lib.chapter.checks.s02_turn_cap import check`` then ``await check(capped_loop)``.
``harness_lib.chapter.checking`` is what they are built from."""
