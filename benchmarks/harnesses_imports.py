"""What each harness imports: timed first, in a fresh process, before anything else of ours."""

IMPORTS = {
    "httpx": ["httpx"],
    "openai": ["openai"],
    "openai-agents": ["agents"],
    "pydantic-ai": ["pydantic_ai", "pydantic_ai.models.openai", "pydantic_ai.providers.openai"],
    "langgraph": ["langgraph.prebuilt", "langchain_openai", "langchain_core.tools"],
    "harness": ["harness_lib.loop", "harness_lib.client", "harness_lib.workspace", "harness_lib.trace"],
    "harness+state": ["harness_lib.loop", "harness_lib.client", "harness_lib.workspace", "harness_lib.trace"],
    "harness+state-tmpfs": ["harness_lib.loop", "harness_lib.client", "harness_lib.workspace", "harness_lib.trace"],
}
PEERS = ("openai", "openai-agents", "pydantic-ai", "langgraph")  # need the bench extra
