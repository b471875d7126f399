"""The notebook's Stop button is the chapter's Stop: interrupting a kernel during a top-level ``await``
of a run ends the run as interrupted / cancelled, within milliseconds, with its state saved."""

import time

import pytest

jupyter_client = pytest.importorskip("jupyter_client.manager")

SETUP = """
import tempfile
from harness_lib.loop import Options, run
from harness_lib.scripted import ScriptedProvider
from harness_lib.state import load, new_run
from harness_lib.workspace import SYSTEM_PROMPT, TASK, Workspace
provider = ScriptedProvider().start()
state_dir = tempfile.mkdtemp()
state = new_run(SYSTEM_PROMPT, TASK, "slow", run_id="k1")
"""


@pytest.mark.slow
def test_kernel_interrupt_cancels_the_run_and_saves_it():
    km, kc = jupyter_client.start_new_kernel(kernel_name="python3")
    try:
        assert kc.execute_interactive(SETUP, timeout=60)["content"]["status"] == "ok"
        msg_id = kc.execute("state = await run(state, Workspace.copy_of().tools(), "
                            "Options(base_url=provider.base_url, state_dir=state_dir))")
        time.sleep(1.0)  # the scan (3 s) is under way
        pressed = time.monotonic()
        km.interrupt_kernel()
        while True:
            msg = kc.get_iopub_msg(timeout=20)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status" \
                    and msg["content"]["execution_state"] == "idle":
                break
        elapsed = time.monotonic() - pressed
        outputs = []
        kc.execute_interactive("saved = load(state_dir, 'k1'); print(state.status, saved.status, "
                               "saved.interruption['type'], saved.turns)",
                               output_hook=lambda m: outputs.append(m["content"].get("text", "")), timeout=30)
        assert "".join(outputs).split() == ["interrupted", "interrupted", "cancelled", "1"]
        assert elapsed < 1.0  # far less than the 2 s the scan still had to go
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
