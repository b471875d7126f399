"""Mistakes in notebook 15's window, ``drop_old_tool_results``, and the request of its ``agent_loop``."""

from . import mistake

OLD = "old = set(results[:max(len(results) - keep_last, 0)])"
KEPT = '{**m, "content": placeholder} if i in old else m'
RETURN = 'return [{**m, "content": placeholder} if i in old else m for i, m in enumerate(messages)]'
REQUEST = "reply = await call_model(url, model, window(messages) if window else messages, schemas)"

MISTAKES = (
    mistake("the window that drops the call id: a fresh message with the placeholder only",
            (KEPT, '{"role": "tool", "content": placeholder} if i in old else m'), hint="`tool_call_id`"),
    mistake("the old results left out of the request altogether, their calls left unanswered",
            (RETURN, "return [m for i, m in enumerate(messages) if i not in old]"),
            hint="a tool result must follow the call it answers"),
    mistake("the newest keep_last counted from the end with a negative slice: keep_last 0 keeps everything",
            (OLD, "old = set(results[:-keep_last])"), hint="keep_last 0"),
    mistake("no floor at 0: with fewer results than keep_last the slice end goes negative",
            (OLD, "old = set(results[:len(results) - keep_last])"), hint="fewer results than keep_last"),
    mistake("every older message sent as the placeholder, the assistant's calls too",
            ('if m["role"] == "tool"]', 'if m["role"] != "system"]'),
            hint="only tool results go out as the placeholder"),
    mistake("the newest results dropped and the oldest kept",
            (OLD, "old = set(results[keep_last:])"), hint="the newest keep_last results are the last ones"),
    mistake("the placeholder written into the transcript itself",
            (RETURN, 'for i in old:\n            messages[i]["content"] = placeholder\n        return messages'),
            hint="changed the transcript itself"),
    mistake("a placeholder of one's own, not the one given",
            ('"content": placeholder}', '"content": "(dropped)"}'), hint="the placeholder given"),
    mistake("the window called even when there is none",
            (REQUEST, "reply = await call_model(url, model, window(messages), schemas)"),
            hint="`window(messages) if window else messages`"),
    mistake("the transcript replaced by the window's view of it",
            (REQUEST, "messages = window(messages) if window else messages\n"
                      "        reply = await call_model(url, model, messages, schemas)"),
            hint="windowed its own transcript"),
    mistake("the window never asked", (REQUEST, "reply = await call_model(url, model, messages, schemas)"),
            hint="never asked the window"),
)
