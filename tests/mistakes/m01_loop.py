"""Mistakes in notebook 01's ``agent_loop``."""

from . import mistake

APPEND = '        messages.append(reply["message"])\n'
RESULT = ('            messages.append({"role": "tool", "tool_call_id": call["id"],\n'
          '                             "name": call["function"]["name"], "content": result})\n')

MISTAKES = (
    mistake("only the first call of a reply run", ("for call in calls:", "for call in calls[:1]:"),
            hint="run every call a reply asks for"),
    mistake("the loop ends when a reply says something, not when it asks for nothing",
            ("        if not calls:\n", '        if reply["message"]["content"]:\n'),
            hint="only a reply without tool calls ends the loop"),
    mistake("the model's reply never appended to the transcript", (APPEND, ""), hint="your loop never ended"),
    mistake("the transcript copied, the copy grown", ("    while True:\n", "    messages = list(messages)\n"
                                                                         "    while True:\n"),
            hint="grow the list it is given"),
    mistake("a tool result without its call id", (RESULT, '            messages.append({"role": "tool", '
                                                          '"content": result})\n'),
            hint="the call id is how the model matches a result to its call"),
    mistake("the tokens of the last turn kept, not added up",
            ('tally["in"] += reply["usage"]["prompt_tokens"]', 'tally["in"] = reply["usage"]["prompt_tokens"]'),
            hint="add up every turn's usage"),
    mistake("a turn counted for every call run", ('        tally["turns"] += 1\n', ""),
            ('            tally["tool_runs"] += 1\n', '            tally["tool_runs"] += 1\n'
                                                     '            tally["turns"] += 1\n'),
            hint="a turn is one request to the model"),
    mistake("the whole reply returned as the answer", ('return reply["message"]["content"], tally',
                                                        'return reply["message"], tally'),
            hint="the answer is the content of the reply that asked for nothing"),
)
