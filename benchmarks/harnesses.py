"""One entry per harness. Each gets the same task: the scripted provider's scenario (``runaway``: it never
stops asking for ``list_files``; ``plan``: list, read, answer), the same two tools over the chapter's
workspace, and its own cap set to stop after ``cap`` model calls. Each returns how it ended (a status, or
the exception it raised) and the usage totals it reports, or None where it offers none.

``IMPORTS`` names what each one imports; the child process times those imports before anything else.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from harness_lib.workspace import DATA_WORKSPACE, SYSTEM_PROMPT, TASK

from .harnesses_imports import IMPORTS, PEERS  # noqa: F401 - re-exported

NAMES = sorted(p.name for p in DATA_WORKSPACE.iterdir() if p.is_file())
LIST_RESULT = json.dumps(NAMES, separators=(",", ":"))


TOOL_RUNS = [0]  # tool executions in the current measurement (the harness counts its own)


def list_files() -> str:
    """List the files in the workspace."""
    TOOL_RUNS[0] += 1
    return LIST_RESULT


def read_file(path: str) -> str:
    """Read one file of the workspace."""
    TOOL_RUNS[0] += 1
    target = DATA_WORKSPACE / path
    if target.parent != DATA_WORKSPACE or not target.is_file():
        return f"Error: no such file: {path}. Call list_files to see what exists."
    return target.read_text()


TOOL_SCHEMAS = [
    {"type": "function", "function": {"name": "list_files", "description": list_files.__doc__,
                                      "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "read_file", "description": read_file.__doc__,
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                     "required": ["path"]}}},
]


def _run_tool(name: str, arguments: str) -> str:
    args = json.loads(arguments or "{}")
    return list_files() if name == "list_files" else read_file(**args)


def _ended(e: BaseException) -> str:
    return f"raises {type(e).__name__}"


# -- the floor: a bare httpx loop --------------------------------------------------------------------------
async def bare_httpx(base_url, meter, scenario, cap):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    async with meter.client() as http:
        for _ in range(cap):
            r = await http.post(base_url + "/chat/completions",
                                json={"model": scenario, "messages": messages, "tools": TOOL_SCHEMAS})
            message = r.json()["choices"][0]["message"]
            messages.append(message)
            if not message.get("tool_calls"):
                return {"ended": "returns the answer", "usage": None}
            for c in message["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                                 "content": _run_tool(c["function"]["name"], c["function"]["arguments"])})
    return {"ended": "its for-loop ends", "usage": None}


# -- a hand loop on the official openai client -----------------------------------------------------------
async def openai_loop(base_url, meter, scenario, cap):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="not-needed", http_client=meter.client(), max_retries=0)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    usage = {"prompt_tokens": 0, "completion_tokens": 0}
    async with client:
        for _ in range(cap):
            reply = await client.chat.completions.create(model=scenario, messages=messages, tools=TOOL_SCHEMAS)
            usage["prompt_tokens"] += reply.usage.prompt_tokens
            usage["completion_tokens"] += reply.usage.completion_tokens
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return {"ended": "returns the answer", "usage": usage}
            for c in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": c.id,
                                 "content": _run_tool(c.function.name, c.function.arguments)})
    return {"ended": "its for-loop ends", "usage": usage}


# -- openai-agents: a chat-completions model at the local base URL, tracing off ---------------------------
async def openai_agents(base_url, meter, scenario, cap):
    from agents import Agent, MaxTurnsExceeded, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="not-needed", http_client=meter.client(), max_retries=0)
    model = OpenAIChatCompletionsModel(model=scenario, openai_client=client)
    agent = Agent(name="ops", instructions=SYSTEM_PROMPT, model=model,
                  tools=[function_tool(list_files), function_tool(read_file)])
    config = RunConfig(tracing_disabled=True)
    try:
        result = await Runner.run(agent, TASK, max_turns=cap, run_config=config)
    except MaxTurnsExceeded as e:
        data = getattr(e, "run_data", None)
        usage = data.context_wrapper.usage if data is not None else None
        return {"ended": _ended(e), "usage": _usage(usage, "input_tokens", "output_tokens")}
    finally:
        await client.close()
    return {"ended": "returns the answer",
            "usage": _usage(result.context_wrapper.usage, "input_tokens", "output_tokens")}


def _usage(u, prompt: str, completion: str):
    return None if u is None else {"prompt_tokens": getattr(u, prompt), "completion_tokens": getattr(u, completion)}


# -- pydantic-ai ------------------------------------------------------------------------------------------
async def pydantic_ai(base_url, meter, scenario, cap):
    from openai import AsyncOpenAI
    from pydantic_ai import Agent, UsageLimitExceeded
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import RunUsage, UsageLimits

    client = AsyncOpenAI(base_url=base_url, api_key="not-needed", http_client=meter.client(), max_retries=0)
    model = OpenAIChatModel(scenario, provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, instructions=SYSTEM_PROMPT, tools=[list_files, read_file])
    usage = RunUsage()  # passed in, so what was spent is still readable after the limit raises
    try:
        await agent.run(TASK, usage_limits=UsageLimits(request_limit=cap), usage=usage)
        ended = "returns the answer"
    except UsageLimitExceeded as e:
        ended = _ended(e)
    finally:
        await client.close()
    return {"ended": ended, "usage": _usage(usage, "input_tokens", "output_tokens")}


# -- LangGraph's prebuilt ReAct agent --------------------------------------------------------------------
async def langgraph(base_url, meter, scenario, cap):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.errors import GraphRecursionError
    from langgraph.prebuilt import create_react_agent

    http = meter.client()
    llm = ChatOpenAI(model=scenario, base_url=base_url, api_key="not-needed", http_async_client=http,
                     max_retries=0)
    agent = create_react_agent(llm, [tool(list_files), tool(read_file)], prompt=SYSTEM_PROMPT)
    # Each model call is one step and each tool round another: 2 * cap - 1 steps allow cap model calls.
    try:
        out = await agent.ainvoke({"messages": [("user", TASK)]}, {"recursion_limit": 2 * cap - 1})
    except GraphRecursionError as e:
        return {"ended": _ended(e), "usage": None}  # the state, and its usage, go with the exception
    finally:
        await http.aclose()
    totals = {"prompt_tokens": 0, "completion_tokens": 0}
    for m in out["messages"]:
        if u := getattr(m, "usage_metadata", None):
            totals["prompt_tokens"] += u["input_tokens"]
            totals["completion_tokens"] += u["output_tokens"]
    return {"ended": "returns the answer", "usage": totals}


# -- this harness ----------------------------------------------------------------------------------------
async def _harness(base_url, meter, scenario, cap, state_dir: bool, tmpfs: bool = False):
    from harness_lib.client import ModelClient
    from harness_lib.loop import Options, run
    from harness_lib.state import new_run
    from harness_lib.trace import Trace
    from harness_lib.workspace import Workspace

    # On a tmpfs an fsync returns at once: the state dir's cost without the disk's (the difference is the disk)
    where = "/dev/shm" if tmpfs and Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="bench-", dir=where) as tmp:
        client = ModelClient(base_url, http=meter.client())
        options = Options(client=client, max_turns=cap, trace=Trace(Path(tmp) / "trace.jsonl"),
                          state_dir=Path(tmp) / "state" if state_dir else None)
        if options.state_dir:
            options.state_dir.mkdir()
        try:
            state = await run(new_run(SYSTEM_PROMPT, TASK, scenario), Workspace.copy_of(into=Path(tmp) / "ws").tools(),
                              options)
        finally:
            await client.http.aclose()
    return {"ended": f"status {state.status}", "tool_runs": state.tool_runs,
            "usage": {"prompt_tokens": state.prompt_tokens, "completion_tokens": state.completion_tokens}}


async def harness(base_url, meter, scenario, cap):
    return await _harness(base_url, meter, scenario, cap, state_dir=False)


async def harness_state(base_url, meter, scenario, cap):
    return await _harness(base_url, meter, scenario, cap, state_dir=True)


async def harness_state_tmpfs(base_url, meter, scenario, cap):
    return await _harness(base_url, meter, scenario, cap, state_dir=True, tmpfs=True)


HARNESSES = {"httpx": bare_httpx, "openai": openai_loop, "openai-agents": openai_agents, "pydantic-ai": pydantic_ai,
             "langgraph": langgraph, "harness": harness, "harness+state": harness_state,
              "harness+state-tmpfs": harness_state_tmpfs}
