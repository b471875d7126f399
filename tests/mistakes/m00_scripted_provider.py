"""Mistakes in notebook 00's provider: ``reply_to`` and ``usage_of``."""

from . import mistake

TURN = 'turn = sum(1 for m in messages if m["role"] == "assistant")'
PROMPT = "prompt = count(compact(messages)) + (count(compact(tools)) if tools else 0)"
COMPLETION = 'completion = count(message.get("content") or "") + count(compact(message.get("tool_calls") or []))'

MISTAKES = (
    mistake("the turn kept in a counter of the provider's own, not read off the transcript",
            (TURN, "turn = TURNS[model] = TURNS.get(model, -1) + 1"),
            ("def reply_to(", "TURNS = {}\n\n\ndef reply_to("), hint="never remembered"),
    mistake("the turn counted from the tool results",
            (TURN, 'turn = sum(1 for m in messages if m["role"] == "tool")'),
            hint="the number of assistant messages so far"),
    mistake("the tool results joined with nothing between them",
            ('tool_text = "\\n".join(', 'tool_text = "".join('), hint="joined by newlines"),
    mistake("the tools left out of the bill", (PROMPT, "prompt = count(compact(messages))"),
            hint="billed with every request"),
    mistake("the tools billed even when a request has none",
            (PROMPT, "prompt = count(compact(messages)) + count(compact(tools or []))"),
            hint="billed for its messages alone"),
    mistake("the prompt counted message by message",
            (PROMPT, "prompt = sum(count(compact(m)) for m in messages) + (count(compact(tools)) if tools else 0)"),
            hint="not message by message"),
    mistake("the reply billed for its text only", (COMPLETION, 'completion = count(message.get("content") or "")'),
            hint="billed for its text and its calls"),
    mistake("the reply billed as the whole message's JSON", (COMPLETION, "completion = count(compact(message))"),
            hint="not the message's envelope"),
    mistake("the bill without its total",
            ('return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}',
             'return {"prompt_tokens": prompt, "completion_tokens": completion}'), hint="`total_tokens`, their sum"),
)
