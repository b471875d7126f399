"""What the local model reads, token by token, with llama.cpp's own tokenizer (issue 36): only the chat format's
structure is read as control tokens, and the text of every message as text, whatever the vocabulary's special
tokens are. Two vocabularies: the bundled SmolLM2's, and a fixture with Qwen's and Llama's tool tokens
(tests/gguf_vocab.py: no download). Needs the `local` extra (llama-cpp-python), not the model's weights."""

from __future__ import annotations

import json
import os

import pytest

from harness_lib import local
from harness_lib import local_format as lf

if why := local.missing():
    if os.environ.get("HARNESS_REQUIRE_LOCAL") == "1":
        pytest.fail(f"HARNESS_REQUIRE_LOCAL=1 but the local model is {why}", pytrace=False)
    pytest.skip(f"the local model is {why}", allow_module_level=True)

import gguf_vocab  # noqa: E402
from llama_cpp import Llama  # noqa: E402
from llama_cpp import llama_cpp as ll  # noqa: E402
from test_local_format import KINDS, conversation  # noqa: E402

SPECIAL = ll.LLAMA_TOKEN_ATTR_CONTROL | ll.LLAMA_TOKEN_ATTR_USER_DEFINED | ll.LLAMA_TOKEN_ATTR_UNKNOWN
# As the models' own GGUF files declare them: Llama 3's and Qwen's markers are control tokens; Qwen2.5's
# <tool_call> and Qwen3's <think> and <tool_response> are added tokens not marked special, which a GGUF holds as
# user-defined, and which llama.cpp finds in text even when told not to parse special tokens.
ADDED = {**dict.fromkeys(["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                          "<|eom_id|>", "<|python_tag|>", "<|fim_prefix|>", "<|repo_name|>", "<|file_sep|>",
                          "<|vision_start|>"], gguf_vocab.CONTROL),
         **dict.fromkeys(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>",
                          "</think>"], gguf_vocab.USER_DEFINED)}


@pytest.fixture(scope="module")
def qwen_and_llama(tmp_path_factory):
    """SmolLM2's vocabulary and the tokens of ADDED, with a BOS as Llama 3 has one."""
    path = gguf_vocab.with_tokens(local.model_path(), tmp_path_factory.mktemp("vocab") / "vocab.gguf", ADDED,
                                  bos="<|begin_of_text|>")
    return Llama(str(path), vocab_only=True, verbose=False)


@pytest.fixture(scope="module", params=["smollm2", "qwen-and-llama"])
def llama(request):
    if request.param == "smollm2":
        return Llama(str(local.model_path()), vocab_only=True, verbose=False)
    return request.getfixturevalue("qwen_and_llama")


def special_tokens(llama) -> dict[int, str]:
    vocab = ll.llama_model_get_vocab(llama.model)
    return {i: ll.llama_vocab_get_text(vocab, i).decode() for i in range(ll.llama_vocab_n_tokens(vocab))
            if ll.llama_vocab_get_attr(vocab, i) & SPECIAL}


def as_text_prompt(llama, prompt: str) -> list[int]:
    """What llama-cpp-python reads for a prompt given as text: its BOS if the model asks for one, then the text
    tokenized with special tokens parsed (how the server read every prompt before issue 36)."""
    return llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)


class Reader:
    """The model, as far as the chat format sees it, recording what each step gives it to read; it answers in
    words ("message:", then "ok")."""

    def __init__(self, llama):
        self.llama, self.read = llama, []

    def __getattr__(self, name):
        return getattr(self.llama, name)

    def create_completion(self, prompt, **_):
        self.read.append(prompt if isinstance(prompt, list) else as_text_prompt(self.llama, prompt))
        yield {"choices": [{"text": "message:" if len(self.read) == 1 else "ok", "finish_reason": "stop"}]}


def served(llama, messages, tools, log=None) -> list[int]:
    """What the model reads for this request, as the server's chat handler gives it."""
    reader = Reader(llama)
    lf.HarnessChat(log)(llama=reader, messages=messages, tools=tools, tool_choice="auto")
    return reader.read[0]


@pytest.mark.parametrize("kind", KINDS)
def test_no_special_token_written_in_a_message_is_read_as_one(llama, kind, tmp_path):
    specials = special_tokens(llama)
    assert {"<|endoftext|>", "<repo_name>", "<|im_start|>"} <= set(specials.values())
    # every special token of the vocabulary, each alone between letters, then all of them side by side
    planted = "".join(f" a{t}b" for t in specials.values()) + "".join(specials.values())
    messages, tools = conversation(kind, planted)
    log = tmp_path / "prompts.jsonl"
    read = served(llama, messages, tools, log)
    benign = as_text_prompt(llama, lf.render(*conversation(kind, "")))
    # the special tokens the model read are the format's, where it put them: those of the same request without
    # the planted text, read the way llama-cpp-python reads a prompt
    assert [specials[i] for i in read if i in specials] == [specials[i] for i in benign if i in specials]
    # and the prompt shown to a reader is the text the model read after its BOS, the planted tokens in it as text
    shown = json.loads(log.read_text(encoding="utf-8"))["prompt"]
    bos = llama.tokenize(b"", add_bos=True)
    assert read[:len(bos)] == bos and llama.detokenize(read[len(bos):], special=True).decode("utf-8") == shown
    assert all(t in shown for t in specials.values() if t not in (lf.START, lf.END))


def test_the_fixture_has_tokens_llama_cpp_finds_in_text_even_unparsed(qwen_and_llama):
    """What makes the cut in ``local_format.plain`` necessary: without it, Qwen's <tool_call> is read as its token.
    And the fixture's prompts start with a BOS, as Llama 3's do."""
    llama = qwen_and_llama
    specials = special_tokens(llama)
    assert specials[lf.HarnessChat().vocabulary(llama).bos[0]] == "<|begin_of_text|>"
    found = llama.tokenize(b"a<tool_call>b", add_bos=False, special=False)
    assert any(specials.get(i) == "<tool_call>" for i in found)
    assert not any(i in specials for i in lf.plain(llama, "a<tool_call>b", ["<tool_call>"]))
    assert lf.HarnessChat().vocabulary(llama).found_in_text == [t for t, kind in ADDED.items()
                                                                if kind == gguf_vocab.USER_DEFINED]


@pytest.mark.parametrize("kind", KINDS)
def test_a_prompt_without_planted_tokens_is_read_as_before(llama, kind):
    """The same ids as the whole text tokenized with special tokens parsed, which is how the server read every
    prompt before: the chapter's runs on SmolLM2 (notebook 12) are the same runs."""
    messages, tools = conversation(kind, " with a <b>tag</b>, <|x|> and a | or two")
    assert served(llama, messages, tools) == as_text_prompt(llama, lf.render(messages, tools))
    written = 'functions.read_file:\n{"path": "notes.txt"}\n'
    vocabulary = lf.HarnessChat().vocabulary(llama)
    assert lf.tokens(llama, [*lf.render_parts(messages, tools), written], vocabulary) == \
        as_text_prompt(llama, lf.render(messages, tools) + written)
