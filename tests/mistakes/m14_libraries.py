"""Mistakes in notebook 14's stop predicates and the exit of its ``agent_loop``."""

from . import mistake

STEP = '        steps.append({"tool_calls": calls, "usage": reply["usage"]})\n'
ASK = ('        if any(stop(steps) for stop in stop_when):      # any one true stops the run\n'
       '            return {**tally, "status": "stopped"}\n')
TOOLS = '        for call in calls:\n'

MISTAKES = (
    mistake("the predicates asked before the step's tools run",
            (STEP + ASK, ""), (TOOLS, STEP + ASK + TOOLS), hint="stopped before running the step's tools"),
    mistake("the step added after the predicates are asked", (STEP + ASK, ASK + STEP),
            hint="asked before the step was added"),
    mistake("all the predicates must be true, not any one", ("if any(stop(steps)", "if all(stop(steps)"),
            hint="any one true predicate stops the run"),
    mistake("only the first predicate asked", ("if any(stop(steps) for stop in stop_when):",
                                               "if stop_when and stop_when[0](steps):"),
            hint="any one true predicate stops the run"),
    mistake("the step count compared with `>`: one step past n",
            ("len(steps) == n", "len(steps) > n"), hint="step_count_is(n) is true once n steps have run"),
    mistake("has_tool_call asking the first step, not the last",
            ('for call in steps[-1]["tool_calls"]', 'for call in steps[0]["tool_calls"]'),
            hint="the last step, `steps[-1]`"),
    mistake("has_tool_call comparing the name with the call itself",
            ('any(call["function"]["name"] == name for call in steps[-1]["tool_calls"])',
             'name in steps[-1]["tool_calls"]'), hint="compare each call's"),
    mistake("called_at_least true only past n", (") >= n", ") > n"), hint="reaches n (`>=`)"),
    mistake("called_at_least counting the last step's calls only",
            ('for step in steps for call in step["tool_calls"]', 'for call in steps[-1]["tool_calls"]'),
            hint="counts every call of `name` in every step so far"),
    mistake("a status of one's own", ('"status": "stopped"', '"status": "stop_condition"'),
            hint="the loop's word for how it ended"),
    # A second reader's, written from the exercise notebook alone (issue 44)
    mistake("a run a predicate ended called completed: ai's loop simply ends",
            ('"status": "stopped"', '"status": "completed"'), hint="`stopped` when a predicate said yes"),
    mistake("called_at_least counts the steps that called the tool, not the calls",
            ('sum(call["function"]["name"] == name for step in steps for call in step["tool_calls"])',
             'sum(any(call["function"]["name"] == name for call in step["tool_calls"]) for step in steps)'),
            hint="counts every call of `name`"),
)
