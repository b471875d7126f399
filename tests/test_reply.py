"""reply.read_reply on its own: what it keeps, what it renames, what it refuses, what it estimates."""

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
