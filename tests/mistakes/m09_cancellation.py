"""Mistakes in notebook 09's ``scan_archive_tool`` and stoppable ``agent_loop``."""

from . import mistake

SLEEP = '            await asyncio.sleep(seconds / steps)   # Stop lands here, as CancelledError\n'
RUN = ('                result = await by_name[name].run(json.loads(call["function"]["arguments"]),\n'
       '                                                 ToolContext(run_id="mine", call_id=call["id"], '
       'progress=progress))\n')
AROUND_THE_CALL = ('                try:\n'
                   '                    result = await by_name[name].run('
                   'json.loads(call["function"]["arguments"]),\n'
                   '                                                     '
                   'ToolContext(run_id="mine", call_id=call["id"], progress=progress))\n'
                   '                except asyncio.CancelledError:\n'
                   '                    result = "stopped"\n')
CAUGHT = ('    except asyncio.CancelledError as stop:   # Stop: the task was cancelled, at whatever it was awaiting\n'
          '        return {**tally, "status": "interrupted", "reason": stop.args[0] if stop.args else "cancelled"}\n')

MISTAKES = (
    mistake("a cancel that stops the loop but not the tool: the tool run as a task of its own, shielded",
            (RUN, RUN.replace("await by_name[name].run(", "await asyncio.shield(asyncio.ensure_future(by_name[name]"
                              ".run(").replace("progress=progress))", "progress=progress))))")),
            hint="Stop ended your loop but not the tool"),
    mistake("a scan deaf to Stop: the pause swallows the cancellation",
            (SLEEP, '            try:\n                await asyncio.sleep(seconds / steps)\n'
                    '            except asyncio.CancelledError:\n                pass\n'),
            hint="your scan did not stop where Stop landed"),
    mistake("a scan that blocks: time.sleep instead of asyncio.sleep",
            (SLEEP, '            __import__("time").sleep(seconds / steps)\n'),
            hint="your scan did not stop where Stop landed"),
    mistake("no try around the loop: Stop's CancelledError escapes",
            ('    try:\n        while True:', '    if True:\n        while True:'), (CAUGHT, ""),
            hint="must end the run, not escape it"),
    mistake("the reason dropped", ('"reason": stop.args[0] if stop.args else "cancelled"', '"reason": "cancelled"'),
            hint="keep the reason Stop gave"),
    mistake("the progress counted but never passed on", ('        on_progress(label)\n', ''),
            hint="never reached whoever watches"),
    mistake("the cancellation caught around the tool call: the run goes on",
            (RUN, AROUND_THE_CALL),
            hint="Stop reached the tool but your loop went on"),
    mistake("on_tool_start told after the tool ran", ('                on_tool_start(name)\n', ''),
            ('                tally["tool_runs"] += 1\n', '                tally["tool_runs"] += 1\n'
                                                         '                on_tool_start(name)\n'),
            hint="`on_tool_start(name)`, before it runs"),
    mistake("a progress label of its own words",
            ('ctx.progress(f"scanned {step * files // steps} of {files} files")', 'ctx.progress(f"{step}/{steps}")'),
            hint="report progress after each pause"),
    # A second reader's, written from the exercise notebook alone (issue 44)
    mistake("a tool run counted before the tool runs",
            ('                on_tool_start(name)\n',
             '                on_tool_start(name)\n                tally["tool_runs"] += 1\n'),
            ('                tally["tool_runs"] += 1\n                messages.append',
             '                messages.append'),
            hint="once each has returned"),
)
