"""The scripted provider: the other side of the wire. It knows JSON and tokens, never the harness."""

from .scripts import SCRIPTS, next_message
from .server import ScriptedProvider, serve

__all__ = ["SCRIPTS", "ScriptedProvider", "next_message", "serve"]
