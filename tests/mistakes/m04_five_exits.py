"""Mistakes in notebook 04's ``Run``, ``run_owed`` and ``agent``."""

from . import mistake

CANCELLED = ('    except asyncio.CancelledError as e:                    # Stop: the run is fine, and can go on\n'
             '        ### BEGIN SOLUTION\n'
             '        return stop(run, "interrupted", {"type": "cancelled", "reason": e.args[0] if e.args else '
             '"cancelled"})\n'
             '        ### END SOLUTION\n')
LIMITS = ('            if run.turns >= max_turns:\n'
          '                return stop(run, "max_turns_exceeded", {"type": "max_turns"})\n'
          '            if run.cost_usd >= max_budget_usd:\n'
          '                return stop(run, "budget_exceeded", {"type": "max_budget"})\n')
OWED = ('            if owed(run.messages):\n'
        '                if await run_owed(run, by_name, on_event):  # stopped for an approval\n'
        '                    return run\n'
        '                continue                                   # check the limits again before paying\n')
GATE = ('        if tool.needs_approval and call["id"] not in run.approved:\n'
        '            return stop(run, "interrupted", {"type": "approval", "callId": call["id"],\n'
        '                                             "toolName": tool.name, "args": args})\n')
ANSWERED = ('            if last["role"] == "assistant" and not last.get("tool_calls"):\n'
            '                run.output = last["content"]\n'
            '                return stop(run, "completed")\n')

MISTAKES = (
    mistake("Stop caught and folded into failure: every exit that is not an answer is 'failed'",
            ('return stop(run, "interrupted", {"type": "cancelled", "reason": e.args[0] if e.args else "cancelled"})',
             'return stop(run, "failed", error=f"stopped: {e}")'), hint="Stop is not a failure"),
    mistake("Stop not caught at all: only errors are (CancelledError is not an Exception)", (CANCELLED, ""),
            hint="Stop reaches the loop as `CancelledError`"),
    mistake("the budget compared with `>` where the chapter stops at `>=`",
            ("if run.cost_usd >= max_budget_usd:", "if run.cost_usd > max_budget_usd:"),
            hint="one turn past the budget"),
    mistake("the owed calls run before the limits are checked (02's order: a paid turn's calls at once)",
            (LIMITS + OWED, OWED + LIMITS), hint="ran the calls of the turn that reached a limit before checking it"),
    mistake("every run that did not complete called resumable, a failed one too",
            ("return self.status in RESUMABLE", 'return self.status != "completed"'),
            hint="`resumable` is true for exactly three statuses"),
    mistake("no approval gate: run_owed runs every owed call", (GATE, ""), hint="without an approval"),
    mistake("the approval gate ignores the approvals: an approved call stops the run again",
            ('if tool.needs_approval and call["id"] not in run.approved:', "if tool.needs_approval:"),
            hint="an approved call must run when the run is handed back"),
    mistake("the interruption named after the status, not the chapter's type",
            ('{"type": "max_turns"}', '{"type": "max_turns_exceeded"}'), hint="the interruption says why"),
    mistake("owed keyed on the tool's name, not the call's id: a second list_files looks answered",
            ('answered = {m.get("tool_call_id") for m in messages if m["role"] == "tool"}\n'
             '    return [call for call in asked if call["id"] not in answered]',
             'answered = {m.get("name") for m in messages if m["role"] == "tool"}\n'
             '    return [call for call in asked if call["function"]["name"] not in answered]'),
            hint="left calls unanswered"),
    mistake("no completed exit at the top: an answer is only seen where the model is called",
            (ANSWERED, ""), hint="a run whose last message is an answer has ended"),
    # A second reader's, written from the exercise notebook alone (issue 44)
    mistake("a tool run counted before the tool runs: a stopped scan still counts",
            ('        content = await tool.run(args, ToolContext(run_id="mine", call_id=call["id"]))\n'
             '        run.tool_runs += 1\n',
             '        run.tool_runs += 1\n'
             '        content = await tool.run(args, ToolContext(run_id="mine", call_id=call["id"]))\n'),
            hint="once each has returned"),
)
