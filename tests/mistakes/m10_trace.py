"""Mistakes in notebook 10's ``trace_to`` and traced ``agent_loop``."""

from . import mistake

LINE = 'line = json.dumps({"runId": run_id, "type": type, **fields}, separators=(",", ":"))'
TURN = 'costUsd=round(tally["cost_usd"], 6),\n              finish=reply["finish_reason"])'
STOPPED = 'trace(run_id, "run_stopped", status=status, reason=reason, turns=tally["turns"],'
PROGRESS = ('ToolContext(run_id, call_id, progress=lambda label,\n'
            '                                             name=name: trace(run_id, "tool_progress", toolName=name, '
            'label=label)))')

MISTAKES = (
    mistake("a trace line without the run id", (LINE, 'line = json.dumps({"type": type, **fields}, '
                                                       'separators=(",", ":"))'),
            hint="every line carries the run id"),
    mistake("a turn line without the running cost", (TURN, 'finish=reply["finish_reason"])'),
            hint="the running cost"),
    mistake("a turn line with that turn's cost, not the run's so far",
            (TURN, 'costUsd=round(used["prompt_tokens"] * 2.00 / 1e6 + used["completion_tokens"] * 12.00 / 1e6, 6),'
                   '\n              finish=reply["finish_reason"])'),
            hint="not this turn's alone"),
    mistake("run_stopped without the reason", (STOPPED, 'trace(run_id, "run_stopped", status=status, '
                                                        'turns=tally["turns"],'),
            hint="run_stopped carries the reason"),
    mistake("the file opened to write, not to append", ('with open(path, "a") as f:', 'with open(path, "w") as f:'),
            hint="open the file to append"),
    mistake("the line written by hand, not as JSON",
            (LINE, 'line = f\'{{"runId":"{run_id}","type":"{type}"\' + "".join(f\',"{k}":{json.dumps(v)}\' '
                   'for k, v in fields.items()) + "}"'),
            hint="write each event with `json.dumps(...)`"),
    mistake("the tool's progress never traced", (PROGRESS, 'ToolContext(run_id, call_id))'),
            hint="a tool's progress is a line of its own"),
    mistake("a turn line without its tokens", ('"turn", turn=tally["turns"], **used,', '"turn", turn=tally["turns"],'),
            hint="that turn's tokens"),
    mistake("the run id written as the chapter's, whatever the run's", (LINE, LINE.replace('run_id, "type"',
                                                                                            '"n1", "type"')),
            hint="the id of its own run"),
    # A second reader's, written from the exercise notebook alone (issue 44)
    mistake("run_stopped without the turn count",
            ('status=status, reason=reason, turns=tally["turns"],', 'status=status, reason=reason,'),
            hint="each line carries the chapter's fields"),
    mistake("the turn line without its finish",
            (',\n              finish=reply["finish_reason"])', ')'), hint="each line carries the chapter's fields"),
    mistake("tool_result written before the tool runs",
            ('            started = time.perf_counter()\n', '            started = time.perf_counter()\n'
             '            trace(run_id, "tool_result", toolName=name, ms=0, ok=True)\n'),
            ('            trace(run_id, "tool_result", toolName=name, '
             'ms=round((time.perf_counter() - started) * 1000), ok=True)\n', ''),
            hint="`tool_result` once it has run"),
)
