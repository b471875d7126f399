"""What every harness is measured with: an httpx client whose event hooks note, per model call, when the
request left, its size, the provider's own time (its ``Server-Timing`` header) and the usage it reported.

Every library below accepts an ``httpx.AsyncClient`` of ours, so the same hooks time all of them, and the
overhead per turn is the same subtraction for each: the time from one request to the next, less the
provider's time for the first. What is left is the library: its loop, the tool run, building and encoding
the growing transcript, httpx and loopback.
"""

from __future__ import annotations

import json
import statistics
import time

import httpx


class Meter:
    def __init__(self):
        self.marks: list[float] = []
        self.request_bytes: list[int] = []
        self.server_ms: list[float] = []
        self.usage: list[dict] = []

    async def _request(self, request: httpx.Request):
        self.marks.append(time.perf_counter())
        try:
            self.request_bytes.append(len(request.content))
        except httpx.RequestNotRead:  # a streamed body: not one of ours, but say so rather than guess
            self.request_bytes.append(-1)

    async def _response(self, response: httpx.Response):
        timing = response.headers.get("Server-Timing", "")
        self.server_ms.append(float(timing.split("dur=")[1]) if "dur=" in timing else 0.0)
        await response.aread()  # so the usage can be read after the run, whoever consumed the body
        self._responses.append(response)

    def client(self, **kwargs) -> httpx.AsyncClient:
        self._responses: list[httpx.Response] = []
        return httpx.AsyncClient(trust_env=False, timeout=30,
                                 event_hooks={"request": [self._request], "response": [self._response]}, **kwargs)

    def collect_usage(self):
        """The provider's own usage figures, one per answered call (read after the clock stops)."""
        self.usage = [json.loads(r.content).get("usage") or {} for r in self._responses]

    @property
    def calls(self) -> int:
        return len(self.marks)

    def server_totals(self) -> dict:
        return {k: sum(u.get(k, 0) for u in self.usage) for k in ("prompt_tokens", "completion_tokens")}

    def overhead_ms(self) -> list[float]:
        """Per turn: wall time from this request to the next, less the provider's time for this one."""
        return [(b - a) * 1000 - s for a, b, s in zip(self.marks, self.marks[1:], self.server_ms)]


def summary(overhead: list[float]) -> dict:
    return {"median_ms": statistics.median(overhead), "min_ms": min(overhead),
            "first_10_ms": statistics.median(overhead[:10]), "last_10_ms": statistics.median(overhead[-10:])}
