"""How much of the translated notebooks is still English where it is the companion's own (issue 46, item 4).

``tests/english_share.py`` measures it on the committed notebooks: prose-like output lines that are not the model's
world (which stays English by design: the glossaries say so), and prose comments, each English when the English
notebook's same cell has it too. The issue's goal is at most 10 % of each, reached: every code cell's comments go
through the catalogues, the tables show their row and column labels translated, and the sentences a notebook's own
code prints are translated in its code (its `{...}` fields kept). What is left: the lines the chapter itself prints
(English in its Bulgarian and Hungarian texts too), the library's own reasons and labels, and the notebooks' table
labels; the shares may only go down from here: a change that brings English back into a translated notebook fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import english_share  # noqa: E402

GOAL = 0.10
# The shares measured on 7 December 2026, rounded up (bg: 24 of 850 lines, 2 of 251 comments; hu: 39 of 753, 4 of
# 248; what is left: lines the chapter prints, the library's stop reasons, labels the notebooks make in f-strings,
# and comments that are code or read the same in Hungarian): lower them as more goes through the catalogues.
CEILING = {("bg", "lines"): 0.03, ("hu", "lines"): 0.06, ("bg", "comments"): 0.01, ("hu", "comments"): 0.02}


@pytest.mark.parametrize("language", ["bg", "hu"])
def test_the_english_left_in_a_translated_notebook_does_not_grow(language):
    measured = english_share.measure(language)
    for kind in ("lines", "comments"):
        english, total = measured[kind]
        assert total > 200, f"{language}: only {total} prose-like {kind} found: the measure reads nothing"
        share = english / total
        worst = sorted(measured[f"english_{kind}"].items(), key=lambda kv: -kv[1])[:5]
        assert share <= min(CEILING[language, kind], GOAL), (
            f"{language}: {english} of {total} prose-like {kind} are English ({share:.0%}, at most "
            f"{CEILING[language, kind]:.0%}, the goal {GOAL:.0%}); the most frequent: {worst}")


def test_the_measure_counts_what_is_the_companion_s_and_no_more():
    assert english_share.prose_like("the parent's total, the child's turns included: $0.007794")
    assert not english_share.prose_like("status=completed  turns=3  tools=2  in=815")       # a run line
    assert not english_share.prose_like('{"runId":"n1","type":"turn","turn":1}')               # a trace line
    assert not english_share.prose_like("max_turns_exceeded")                                  # a name
    assert english_share.is_model_world("The timeout is set in config.yaml, and worker 7 hit it.") or \
        english_share.is_model_world("Which file mentions a timeout?")                         # the task
    assert english_share.is_model_world("You are an operations assistant. Use the tools to inspect the workspace, "
                                        "then answer it briefly.")
    assert english_share.CHAPTER_LINES.search("progress: scanned 400 of 1200 files  (t+1,002 ms)")
    assert not english_share.is_model_world("the loop above, no window")
