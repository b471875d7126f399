"""Mistakes in notebook 07's ``new_state``, ``approve``, ``reject`` and the gate of ``agent_loop``."""

from . import mistake

REJECTED = ('                if call["id"] in state["rejected"]:       # a person said no: the slot says so\n'
            '                    result = state["rejected"][call["id"]]\n')
GATE = ('                elif tool.needs_approval and call["id"] not in state["approved"]:'
        '   # the gate: return, and ask\n'
        '                    return stop(state, "interrupted", interruption={\n'
        '                        "type": "approval", "callId": call["id"], "toolName": tool.name, "args": args})\n')
FIRST_GATE = GATE.replace("elif", "if", 1)
FIRST_REJECTED = REJECTED.replace("if", "elif", 1)

MISTAKES = (
    mistake("the approvals kept as a set, which JSON cannot save",
            ('"approved": [], "rejected": {}}', '"approved": set(), "rejected": {}}'),
            ('state["approved"].append(call_id)', 'state["approved"].add(call_id)'), hint="keep `approved` a list"),
    mistake("the approvals kept in a variable of the process, not in the run",
            ("def approve(state, call_id):", "APPROVED = set()\n\n\ndef approve(state, call_id):"),
            ('state["approved"].append(call_id)', "APPROVED.add(call_id)"),
            ('call["id"] not in state["approved"]', 'call["id"] not in APPROVED'),
            hint="nobody had approved it in this run"),
    mistake("a rejection that never tells the model why: the slot always empty",
            ('state["rejected"][call_id] = ("" if silent else f"The user declined this call: {reason}" if reason\n'
             '                                  else "The user declined this call.")',
             'state["rejected"][call_id] = ""'),
            hint="writes the decision into the call's slot in words"),
    mistake("a rejection without a reason says 'None'",
            ('f"The user declined this call: {reason}" if reason\n                                  else '
             '"The user declined this call."', 'f"The user declined this call: {reason}"'),
            hint="`The user declined this call.` without one"),
    mistake("the gate asked before the rejection: a rejected call stops the run again",
            (REJECTED + GATE, FIRST_GATE + FIRST_REJECTED), hint="a rejected call stopped the run again"),
    mistake("the gate ignores the approvals",
            (' and call["id"] not in state["approved"]:   # the gate', ":   # the gate"),
            hint="an approved call must run when the run is handed back"),
    mistake("no gate: every call runs", (GATE, ""), hint="nobody had approved it"),
    mistake("the gate on every tool, not only those that need approval",
            ('elif tool.needs_approval and call["id"]', 'elif call["id"]'), hint="only a tool marked `needs_approval`"),
    mistake("a rejected call counted as a tool run",
            ('                    result = state["rejected"][call["id"]]\n',
             '                    result = state["rejected"][call["id"]]\n'
             '                    state["tool_runs"] += 1\n'),
            hint="a rejected call did not run"),
    mistake("the interruption's arguments left as the call's raw JSON text",
            ('"toolName": tool.name, "args": args}', '"toolName": tool.name, "args": call["function"]["arguments"]}'),
            hint="the arguments parsed from the call's JSON"),
)
