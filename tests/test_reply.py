"""reply.read_reply on its own: what it keeps, what it renames, what it refuses, what it estimates."""

import json

import pytest

from harness_lib.reply import ReplyError, Turn, read_reply
from harness_lib.tokens import completion_tokens, prompt_tokens
from harness_lib.workspace import Workspace

SENT = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def completion(message, usage=None, finish="stop"):
    data = {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if usage is not False:
        data["usage"] = usage or {"prompt_tokens": 10, "completion_tokens": 5}
    return data


def call(cid, name="list_files", args="{}"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def test_a_normal_reply_passes_through_unchanged():
    message = {"role": "assistant", "content": None, "tool_calls": [call("c1")]}
    turn = read_reply(completion(message, finish="tool_calls"), SENT, None, set(), 1)
    assert turn == Turn(message, 10, 5, "tool_calls")
    assert turn.trace_fields() == {}


@pytest.mark.parametrize("ids,used,expect", [
    (["c1", "c1"], set(), ["c1", "h3_2"]),                  # shared in one reply
    (["c1"], {"c1"}, ["h3_1"]),                             # used earlier in the run
    ([""], set(), ["h3_1"]),                                # empty
    ([None], set(), ["h3_1"]),                              # missing
    ([7], set(), ["h3_1"]),                                 # not a string
    (["h3_1", ""], set(), ["h3_1", "h3_2"]),                # ours must not collide with theirs
    ([""], {"h3_1"}, ["h3_1_"]),                            # nor with one used before
])
def test_ids_are_unique_in_the_run(ids, used, expect):
    calls = [call(i) for i in ids]
    for c, i in zip(calls, ids):
        if i is None:
            del c["id"]
    turn = read_reply(completion({"role": "assistant", "tool_calls": calls}), SENT, None, used, 3)
    got = [c["id"] for c in turn.message["tool_calls"]]
    assert got == expect and len(set(got) | used) == len(got) + len(used)
    assert [r["to"] for r in turn.renamed] == [g for g, i in zip(got, ids) if g != i]


def test_usage_missing_is_counted_with_the_chapters_convention():
    message = {"role": "assistant", "content": "done"}
    tools = [t.schema() for t in Workspace.copy_of().tools()]
    turn = read_reply(completion(message, usage=False), SENT, tools, set(), 1)
    assert (turn.prompt_tokens, turn.completion_tokens, turn.estimated) == \
        (prompt_tokens(SENT, tools), completion_tokens(message), True)
    assert turn.trace_fields() == {"estimated": True}


@pytest.mark.parametrize("usage", [{"prompt_tokens": -1, "completion_tokens": 1},
                                   {"prompt_tokens": 10 ** 310, "completion_tokens": 1},
                                   {"prompt_tokens": float("inf"), "completion_tokens": 1},
                                   {"prompt_tokens": "12", "completion_tokens": 1},
                                   {"prompt_tokens": True, "completion_tokens": 1}, [1, 2]])
def test_impossible_usage_is_refused_with_a_message(usage):
    with pytest.raises(ReplyError, match="usage"):
        read_reply(completion({"role": "assistant", "content": "x"}, usage=usage), SENT, None, set(), 1)


@pytest.mark.parametrize("content,marker", [
    ('<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>', "<tool_call>"),
    ('Sure. <tool_call>{"name": "list_files", "arguments": {}}', "<tool_call>"),
    ('<|python_tag|>{"name": "list_files", "parameters": {}}', "<|python_tag|>"),
    ('[TOOL_CALLS] [{"name": "list_files", "arguments": {}}]', "[TOOL_CALLS]"),
    ("<function=list_files>{}</function>", "<function="),
])
def test_a_leaked_call_is_refused_with_the_servers_fix(content, marker):
    with pytest.raises(ReplyError, match="--tool-call-parser hermes") as e:
        read_reply(completion({"role": "assistant", "content": content}), SENT, None, set(), 1)
    assert marker in str(e.value) and "--jinja" in str(e.value)


@pytest.mark.parametrize("content", [
    "The file uses <tool_call> tags in its format.",          # the word, not a call
    '{"name": "Ada", "arguments": 3}',                        # JSON, but no tool of ours
    "errors.log mentions a timeout.",
])
def test_text_that_only_looks_like_a_call_is_an_answer(content):
    tools = [t.schema() for t in Workspace.copy_of().tools()]
    turn = read_reply(completion({"role": "assistant", "content": content}), SENT, tools, set(), 1)
    assert turn.message["content"] == content


@pytest.mark.parametrize("finish,says", [("length", "length limit"), ("content_filter", "content filter")])
def test_cut_and_filtered_replies_carry_a_problem(finish, says):
    turn = read_reply(completion({"role": "assistant", "content": "half"}, finish=finish), SENT, None, set(), 1)
    assert says in turn.problem and turn.message["content"] == "half"


def test_lone_surrogates_are_replaced_and_counted():
    message = {"role": "assistant", "tool_calls": [call("c\ud800", args='{"path":"\udfff"}')], "content": "a\ud83d"}
    turn = read_reply(completion(message), SENT, None, set(), 2)
    assert turn.message["content"] == "a\ufffd" and turn.repaired == 2
    assert turn.message["tool_calls"][0]["function"]["arguments"] == '{"path":"\ufffd"}'
    assert turn.message["tool_calls"][0]["id"] == "h2_1"  # an id with a surrogate is not kept either
    turn.message["content"].encode("utf-8")  # writable anywhere


def test_deep_nesting_in_a_decoded_reply_is_refused():
    deep = []
    for _ in range(100000):
        deep = [deep]
    with pytest.raises(ReplyError, match="not a chat completion|nested too deeply"):
        read_reply({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": deep}}]},
                   SENT, None, set(), 1)


# -- each rule at its edge (found by make mutate: docs/mutation.md) ------------------------------------------
TOOLS = [t.schema() for t in Workspace.copy_of().tools()]


def answer(content, tools=TOOLS):
    return read_reply(completion({"role": "assistant", "content": content}), SENT, tools, set(), 1)


@pytest.mark.parametrize("content", ['{"name": "list_files", "arguments": {}}',
                                     '{"name": "list_files", "parameters": {}}'], ids=["arguments", "parameters"])
def test_a_call_written_as_bare_json_is_refused_with_arguments_or_parameters(content):
    with pytest.raises(ReplyError, match="as JSON text instead of calling the tool"):
        answer(content)


@pytest.mark.parametrize("content, tools", [
    ('{"name": "list_files", "arguments": {}}', None),  # no tool offered: it cannot be a call
    ('{"name": "list_files", "arguments": {}}', []),
    ('{"name": "list_files"}', TOOLS),                  # a tool's name, but no arguments: an answer
    ("{not json, in braces}", TOOLS),
], ids=["no-tools", "empty-tools", "no-arguments", "not-json"])
def test_json_text_that_is_no_call_of_an_offered_tool_is_an_answer(content, tools):
    assert answer(content, tools).message["content"] == content


def test_a_refusal_shows_what_came_cut_at_200_characters():
    with pytest.raises(ReplyError) as e:
        read_reply({"choices": [], "id": "x" * 500}, SENT, None, set(), 1)
    got = str(e.value).partition("; got ")[2]
    assert got == '{"choices": [], "id": "' + "x" * 177


def test_a_refusal_shows_a_value_json_cannot_write_as_text_or_else_its_type():
    with pytest.raises(ReplyError, match=r"not a JSON object; got \"b'oops'\"$"):
        read_reply(b"oops", SENT, None, set(), 1)  # a program's own client returning bytes
    deep: list = []
    for _ in range(100000):
        deep = [deep]
    with pytest.raises(ReplyError, match="not a JSON object; got list$"):
        read_reply(deep, SENT, None, set(), 1)


def test_usage_that_is_not_an_object_is_refused_saying_so_and_showing_the_reply():
    with pytest.raises(ReplyError, match=r"not a chat completion: usage is not an object; got \{\"choices\""):
        read_reply(completion({"role": "assistant", "content": "x"}, usage=[1, 2]), SENT, None, set(), 1)


@pytest.mark.parametrize("sent, kept", [(10.0, 10), (float(10 ** 12), 10 ** 12)], ids=["ten", "bound"])
def test_a_whole_token_count_sent_as_a_float_is_kept_as_a_count_up_to_the_plausible_bound(sent, kept):
    usage = {"prompt_tokens": sent, "completion_tokens": 5.0}
    turn = read_reply(completion({"role": "assistant", "content": "x"}, usage=usage), SENT, None, set(), 1)
    assert (turn.prompt_tokens, turn.completion_tokens) == (kept, 5) and type(turn.prompt_tokens) is int


def test_a_turn_line_says_its_tokens_and_their_total():
    from harness_lib.pricing import Pricing
    from harness_lib.reply import record
    from harness_lib.state import new_run

    class Heard:
        def __init__(self):
            self.lines = []

        def emit(self, run_id, kind, **fields):
            self.lines.append({"type": kind, **fields})

    state, heard = new_run("s", "u", "m"), Heard()
    record(state, Turn({"role": "assistant", "content": "x"}, 100, 20, "stop"), Pricing(), heard)
    line = heard.lines[-1]
    assert (line["prompt_tokens"], line["completion_tokens"], line["total_tokens"]) == (100, 20, 120)
    assert line["turn"] == 1 and line["costUsd"] == state.total_cost_usd > 0 and line["finish"] == "stop"


def message(**fields):
    return {"choices": [{"message": {"role": "assistant", "content": None, **fields}}]}


@pytest.mark.parametrize("data, what", [
    ([1, 2], "not a JSON object"),
    ({"choices": []}, "no choices"),
    ({"choices": [{"message": "hi"}]}, "choices[0].message is not an object"),
    (message(role="user"), "the message's role is 'user', not 'assistant'"),
    (message(content=7), "the message's content is neither text nor null"),
    (message(tool_calls={"id": "c1"}), "tool_calls is not a list"),
    (message(tool_calls=[{"id": "c1", "function": {"arguments": "{}"}}]), "tool call 1 has no function name"),
    (message(tool_calls=[{"id": "c1", "function": {"name": "f", "arguments": 7}}]),
     "tool call 1's arguments are neither text nor an object"),
    ({**message(content="x"), "usage": {"prompt_tokens": -1, "completion_tokens": 1}},
     "usage.prompt_tokens is -1, not a token count between 0 and 10^12"),
    ({**message(content="x"), "usage": {"prompt_tokens": "1" * 100, "completion_tokens": 1}},
     f"usage.prompt_tokens is \"{'1' * 39}, not a token count between 0 and 10^12"),  # cut at 40
], ids=["list", "no-choices", "message-text", "role", "content", "calls-object", "no-name", "arguments",
        "negative-usage", "long-usage"])
def test_each_refusal_says_what_is_wrong_and_shows_the_reply(data, what):
    with pytest.raises(ReplyError) as e:
        read_reply(data, SENT, None, set(), 1)
    assert str(e.value) == f"the provider's reply is not a chat completion: {what}; got {json.dumps(data)[:200]}"


def test_a_message_without_a_role_is_the_assistants():
    turn = read_reply({"choices": [{"message": {"content": "x"}}]}, SENT, None, set(), 1)
    assert turn.message == {"role": "assistant", "content": "x"}


def test_a_call_without_arguments_has_empty_arguments_and_a_finish_that_is_not_text_is_none():
    data = message(tool_calls=[{"id": "c1", "function": {"name": "list_files"}}])
    data["choices"][0]["finish_reason"] = 5
    turn = read_reply(data, SENT, None, set(), 1)
    assert turn.message["tool_calls"][0]["function"]["arguments"] == "" and turn.finish is None


def test_a_surrogate_in_a_calls_name_is_counted_with_the_others():
    turn = read_reply(message(tool_calls=[call("c1", name="list\ud800", args='{"p":"\udfff"}')]), SENT, None, set(), 1)
    assert turn.message["tool_calls"][0]["function"]["name"] == "list\ufffd" and turn.repaired == 2


def test_a_renamed_id_that_was_not_clean_text_is_recorded_as_its_excerpt():
    """The id a server sent, in ``renamed``: as it was when it is text, as JSON text when it is a number or
    holds a lone surrogate (no UTF-8 writer takes it), None when there was none."""
    calls = [call(7), call("c\ud800"), call(None), call("c1"), call("c1")]
    turn = read_reply(message(tool_calls=calls), SENT, None, set(), 4)
    assert turn.renamed == [{"from": "7", "to": "h4_1"}, {"from": '"c\\ud800"', "to": "h4_2"},
                            {"from": None, "to": "h4_3"}, {"from": "c1", "to": "h4_5"}]


def test_a_filtered_reply_says_so_in_full():
    turn = read_reply(completion({"role": "assistant", "content": "half"}, finish="content_filter"), SENT, None,
                      set(), 1)
    assert turn.problem == ('the reply was withheld or cut by the server\'s content filter (finish_reason '
                            '"content_filter"): not an answer')
