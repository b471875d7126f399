"""Mistakes in notebook 02's ``capped_loop``."""

from . import mistake

CAP_CHECK = ('        if tally["turns"] >= max_turns:                      # the one-line fix: a second way out\n'
             '            return {"status": "max_turns_exceeded", **tally}\n')
CALL = '        reply = await call_model(url, model, messages, schemas)\n        tally["turns"] += 1\n'
LAST = '                             "name": call["function"]["name"], "content": result})\n'
AT_THE_BOTTOM = ('        if tally["turns"] >= max_turns:\n'
                 '            return {"status": "max_turns_exceeded", **tally}\n')

MISTAKES = (
    mistake("the cap compared with `>` where the chapter stops at `>=`",
            ('if tally["turns"] >= max_turns:', 'if tally["turns"] > max_turns:'), hint="one turn past the cap"),
    mistake("the cap checked after paying for the turn, before its calls run",
            (CAP_CHECK + CALL, CALL + CAP_CHECK),
            hint="stopped before running the calls of the turn it had paid for"),
    mistake("no cap at all: 01's loop as it was", (CAP_CHECK, ""), hint="never stopped the runaway"),
    mistake("the cap checked at the bottom of the loop, once the calls ran: a cap of 0 still pays a turn",
            (CAP_CHECK, ""), (LAST, LAST + AT_THE_BOTTOM), hint="a cap of 0 paid for a turn"),
    mistake("the status named in other words",
            ('"status": "max_turns_exceeded"', '"status": "max_turns"'), hint="`max_turns_exceeded`"),
    mistake("the tokens of the last turn kept, not added up",
            ('tally["in"] += reply["usage"]["prompt_tokens"]', 'tally["in"] = reply["usage"]["prompt_tokens"]'),
            hint="add up every turn's usage"),
    # A second reader's, written from the exercise notebook alone (issue 44)
    mistake("works on a copy of the caller's transcript: the caller's messages never grow",
            ('    by_name = {tool.name: tool for tool in tools}\n    schemas',
             '    messages = list(messages)\n    by_name = {tool.name: tool for tool in tools}\n    schemas'),
            hint="the `messages` list the loop was given"),
    mistake("tool runs counted once per reply that asks for tools, not once per call",
            ('            tally["tool_runs"] += 1\n', ''),
            ('        for call in calls:\n', '        tally["tool_runs"] += 1\n        for call in calls:\n'),
            hint="count each call the loop runs"),
)
