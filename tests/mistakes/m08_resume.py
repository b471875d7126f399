"""Mistakes in notebook 08's ``pending`` and ``agent_loop``: what is saved when, and what a resume runs first."""

from . import mistake

PENDING = ('        if calls := pending(state):                      # 1. what the transcript owes, first\n'
           '            for call in calls:\n'
           '                tool, args = by_name[call["function"]["name"]], json.loads(call["function"]["arguments"])\n'
           '                try:\n'
           '                    result = await tool.run(args, ToolContext(run_id=state["run_id"], '
           'call_id=call["id"]))\n'
           '                except Exception as error:\n'
           '                    result = f"Error: {error}"\n'
           '                state["tool_runs"] += 1\n'
           '                state["messages"].append({"role": "tool", "tool_call_id": call["id"], "name": tool.name,\n'
           '                                          "content": result})\n'
           '                save(state, folder)                      # each result on disk before the next call runs\n'
           '            continue\n')
PAID_SAVE = '        save(state, folder)                              # the paid turn on disk before its calls run\n'
RESULT_SAVE = ('                save(state, folder)                      '
               '# each result on disk before the next call runs\n')
AT_ONCE = PAID_SAVE + PENDING.replace("            continue\n", "")

MISTAKES = (
    mistake("02's order: a paid turn's calls run at once, nothing owed is run first, so a resume asks the model first",
            (PENDING, ""), (PAID_SAVE, AT_ONCE), hint="a call the run owed was never run"),
    mistake("the paid turn not saved before its calls run (the notebook's 'Try this')", (PAID_SAVE, ""),
            hint="the run on disk at the crash is not the run that died"),
    mistake("the results not saved one by one: a crash loses finished calls, and the resume runs them again",
            (RESULT_SAVE, ""), hint="the run on disk at the crash is not the run that died"),
    mistake("pending keeps every call of the last reply, answered or not",
            ('    return [call for call in asked.get("tool_calls") or [] if call["id"] not in answered]',
             '    return asked.get("tool_calls") or []'), hint="went round without end"),
    mistake("no save before the first turn",
            ('    save(state, folder)                                  # on disk before anything is paid for\n', ""),
            hint="nothing was on disk when the run died before its first turn"),
    mistake("no save when the run ends", ('    ### BEGIN SOLUTION\n    save(state, folder)\n    ### END SOLUTION\n'
                                          '    return state', '    return state'),
            hint="what your loop returns is not what is on disk"),
    # Issue 44: mistakes that passed every case before
    mistake("save writes the file in place: a crash in the middle of a save leaves half a run",
            ('    path.with_suffix(".tmp").write_text(json.dumps(state))\n'
             '    os.replace(path.with_suffix(".tmp"), path)\n', '    path.write_text(json.dumps(state))\n'),
            hint="a save is whole or not made"),
    mistake("the chapter's pending: owed only while the transcript ends with the reply that asked",
            ('    asked = next((m for m in reversed(state["messages"]) if m["role"] == "assistant"), {})\n',
             '    asked = state["messages"][-1] if state["messages"][-1]["role"] == "assistant" else {}\n'),
            hint="not only when the transcript ends with it"),
    mistake("save and load ignore their folder: the run is written in the working folder",
            ('    path = Path(folder) / f"{state[\'run_id\']}.json"', '    path = Path(f"{state[\'run_id\']}.json")'),
            ('    return json.loads((Path(folder) / f"{run_id}.json").read_text())',
             '    return json.loads(Path(f"{run_id}.json").read_text())'),
            hint="`save` writes into the folder it is given"),
    mistake("a tool that raises is not caught: the run dies with it",
            ('                try:\n'
             '                    result = await tool.run(args, ToolContext(run_id=state["run_id"], '
             'call_id=call["id"]))\n                except Exception as error:\n'
             '                    result = f"Error: {error}"\n',
             '                result = await tool.run(args, ToolContext(run_id=state["run_id"], '
             'call_id=call["id"]))\n'),
            hint="a tool that fails"),
)
