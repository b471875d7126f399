"""Mistakes in notebook 06's ``signature`` and dedupe gate."""

from . import mistake

GATE = 'if key in seen and (dedupe == "all" or dedupe == "read-only" and tool.read_only):'
KEY = 'tool, key = by_name[call["function"]["name"]], signature(call)'
SIGNED = 'return call["function"]["name"] + ":" + json.dumps(args, sort_keys=True)'
KEPT = '                    seen.setdefault(key, result)\n'
ERROR = '                    result = f"Error: {error}"\n'
COUNT = '                run["tool_runs"] += 1\n'

MISTAKES = (
    mistake("the cache keyed on the call id, in the signature", (SIGNED, 'return call["id"]'),
            hint="differ only in their id"),
    mistake("the cache keyed on the call id, in the loop", (KEY, 'tool, key = by_name[call["function"]["name"]], '
                                                                 'call["id"]'),
            hint="never its call id"),
    mistake("the cache applied to delete_file: any cache answers any tool",
            (GATE, 'if key in seen and dedupe != "off":'), hint="a tool that writes must run every time"),
    mistake("the signature is the arguments' text, key order and all",
            (SIGNED, 'return call["function"]["name"] + ":" + call["function"]["arguments"]'),
            hint="`sort_keys=True`"),
    mistake("the signature is the tool's name alone", (SIGNED, 'return call["function"]["name"]'),
            hint="your signature leaves something out"),
    mistake("a failure kept in the cache too", (KEPT, ""), (ERROR, ERROR + KEPT[4:]), hint="only a successful result"),
    mistake("a cached answer counted as a tool run", (COUNT, ""),
            ('            if key in seen and', '            run["tool_runs"] += 1\n            if key in seen and'),
            hint="a cached answer is not a tool run"),
    mistake("\"all\" read as the gate: only read-only tools are ever answered",
            (GATE, 'if key in seen and dedupe != "off" and tool.read_only:'), hint="\"all\" is the naive cache"),
    mistake("the cache on whatever `dedupe` says, \"off\" included",
            (GATE, 'if key in seen and (dedupe != "read-only" or tool.read_only):'), hint="with the cache \"off\""),
    # A second reader's, written from the exercise notebook alone (issue 44)
    mistake("the cache kept in a global, shared by every run of the process",
            ('    seen = {}                                            # signature -> the first successful result\n',
             '    seen = SEEN\n'),
            ('async def agent_loop(url', 'SEEN = {}\n\n\nasync def agent_loop(url'),
            hint="a cache belongs to its run"),
    mistake("a failed call's text without notebook 05's `Error: `",
            ('result = f"Error: {error}"', 'result = str(error)'),
            hint="`f\"Error: {error}\"`"),
)
