"""What a notebook cell showed, by kind, for tests that re-run a notebook and compare it with itself."""

from __future__ import annotations


def kinds(outputs) -> list:
    """Stream names, MIME types, error names (not the values, which move). Consecutive chunks of one stream
    count once: how a print is cut into messages is the kernel's timing."""
    seen = []
    for o in outputs:
        kind = (o.output_type, o.get("name") or o.get("ename") or tuple(sorted(o.get("data", {}))))
        if not (seen and kind[0] == "stream" and seen[-1] == kind):
            seen.append(kind)
    return seen
