"""The lane of large AdmissionReviews: a pod of legal size cannot starve the small reviews of other tenants.

A pod may legally carry about 1.4 MB (etcd's limit is 1.5 MiB; 40,000 environment variables fit). Decoding
and judging it is CPU work that holds the event loop: 50 to 150 ms each on a shared 2-CPU machine
(`orjson.loads`, the input-bound walk over every JSON value, the mutation pipeline's copy and diff). Eight of
them arriving together queued every small review behind all of them (bench/bench_floods.py: a normal
/validate went from 5 ms to 200-600 ms here, 2.7 s in issue 30's report), and past `limits.deadlineSeconds`
/validate refuses the other tenant's GPU pod.

So a body above LARGE_BODY_BYTES takes this lane instead of the fast path:

- one review at a time per worker holds the lane's turn, waited for until the review's own deadline;
- its decode runs on the lane's one thread: the event loop keeps answering small reviews meanwhile (the
  decode's Python work gives the GIL up every switch interval). The decision itself stays on the event
  loop, where the native policy engines were built (they are bound to their thread), but it is one
  decision at a time, so a small review waits at most one large decision, never a queue of them;
- a review that gets no turn before its deadline is still decoded (its answer must carry its uid), on the
  same thread, and answered as a deadline failure: per `limits.onError`, and on /validate a GPU pod is
  refused (fail closed), never admitted by the flood.

Small bodies never touch the lane: the fast path is one length comparison longer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from webhook.admission.request import AdmissionRequest, decode_review

# Well above any ordinary pod or workload (a few KiB to tens of KiB: the API server caps annotations at
# 256 KiB), well below what takes the loop long enough to matter (a 1.4 MB pod: 50-150 ms).
LARGE_BODY_BYTES = 256 * 1024
# Large reviews judged at once per worker. One: a small review then waits for at most one large decision.
LARGE_TURNS = 1


class LargeLane:
    """Turns and the decoding thread of large reviews, for one worker's event loop."""

    def __init__(self, threshold: int = LARGE_BODY_BYTES, turns: int = LARGE_TURNS) -> None:
        self.threshold = threshold
        self._turns = turns
        self._semaphore: asyncio.Semaphore | None = None  # made on the serving loop, at first use
        # One thread: decodes queue here, so a flood adds one thread's worth of work, not one per body.
        self._decoder = ThreadPoolExecutor(1, thread_name_prefix="kgwe-large-decode")

    def takes(self, body: bytes) -> bool:
        return len(body) > self.threshold

    @contextlib.asynccontextmanager
    async def turn(self, deadline: float) -> AsyncIterator[bool]:
        """Hold a turn (True) or, when none came before `deadline` (time.monotonic), hold nothing (False)."""
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._turns)
        semaphore = self._semaphore
        acquired = False
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can time out after the acquire succeeded
            # and leak the turn; a cancelled Semaphore.acquire hands its wake-up on to the next waiter.
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await semaphore.acquire()
            acquired = True
        except TimeoutError:
            pass
        try:
            yield acquired
        finally:
            if acquired:
                semaphore.release()

    async def decode(self, body: bytes, *, authenticated: bool) -> AdmissionRequest:
        """`decode_review` on the lane's thread (raises its BadReview)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._decoder, partial(decode_review, body, authenticated=authenticated))

    def close(self) -> None:
        self._decoder.shutdown(wait=False, cancel_futures=True)
