"""The GPipe baseline's serving loop: mini-batches of queued requests, micro-batched.

GPipe (Huang et al., NeurIPS 2019) runs a mini-batch through a pipeline as ``M``
micro-batches and flushes the pipeline before the next mini-batch. Served online, that
is: requests queue at arrival; each replica (one pipeline, cut by
:func:`testbed.llm.partition.balanced_cut`), whenever it is free, takes up to
``batch_size`` queued requests (whatever is queued then, oldest first; it does not wait
to fill a batch), splits them into ``micro_batches`` micro-batches that flow through its
stages concurrently (:func:`testbed.llm.pipeline.generate_batch`), and takes the next
mini-batch after the flush. Replicas pull from one queue, so a free replica takes the
next batch. A request's latency counts from its arrival (queueing for a batch
included). A micro-batch that fails (a hop down) fails its requests; each is queued
again once (attempt 1). GPipe has no notion of a failed replica: it keeps using it.
Waits for a batch are measured on the wall clock and reported in emulated time (wall /
TDF, :mod:`kernel.dilation`), as the requests' own times.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kernel.dilation import emulated, wall
from nodes.llm.wire import Client
from testbed.llm.pipeline import BatchItem, Generation, StepFailed, generate_batch
from testbed.llm.schedule import Replica, Route

__all__ = ["GpipeServer", "Pending"]


@dataclass(frozen=True)
class Pending:
    """A queued request: its index, kind (short/long), item, arrival (``time.monotonic``,
    wall s) and attempt (0, or 1 for a retry)."""

    k: int
    kind: str
    item: BatchItem
    arrived: float
    attempt: int = 0


Served = Callable[[Pending, Route, Generation], None]
"""Called with a served request (its Generation's emulated times count from its
arrival)."""
Failed = Callable[[Pending, Route, StepFailed, bool], None]
"""Called with a failed attempt and whether the request is lost (no retry left)."""


class GpipeServer:
    """One worker per replica taking mini-batches from a shared queue.

    Parameters
    ----------
    replicas : list[Replica]
        The pipelines (routes are node names; ``reach`` maps them to ports).
    reach : dict[str, int]
        Node -> the port reaching it (its link).
    batch_size : int
        Most requests in a mini-batch.
    micro_batches : int
        Micro-batches a mini-batch is split into (fewer when it holds fewer requests).
    served, failed : callables
        Outcome callbacks (:data:`Served`, :data:`Failed`), called from worker threads.
    """

    def __init__(self, replicas: list[Replica], reach: dict[str, int], batch_size: int,
                 micro_batches: int, served: Served, failed: Failed) -> None:  # fmt: skip
        if batch_size < 1 or micro_batches < 1:
            raise ValueError("gpipe batch_size and micro_batches must be >= 1")
        self.replicas, self.reach = replicas, reach
        self.batch_size, self.micro_batches = batch_size, micro_batches
        self.served, self.failed = served, failed
        self.client = Client(timeout_s=wall(60.0))  # 60 emulated s
        self.queue: deque[Pending] = deque()
        self.cond = threading.Condition()
        self.closed = False
        self.batches: list[int] = []  # size of every mini-batch served
        self.workers = [
            threading.Thread(target=self._work, args=(r,), name=f"gpipe-{r}", daemon=True)
            for r in range(len(replicas))
        ]
        for w in self.workers:
            w.start()

    def submit(self, p: Pending) -> None:
        """Queue a request (at its arrival)."""
        with self.cond:
            self.queue.append(p)
            self.cond.notify()

    def close(self) -> None:
        """No more arrivals: serve what is queued, then stop the workers (blocks)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        for w in self.workers:
            w.join()

    def _take(self) -> list[Pending] | None:
        with self.cond:
            while not self.queue and not self.closed:
                self.cond.wait()
            if not self.queue:
                return None
            n = min(self.batch_size, len(self.queue))
            batch = [self.queue.popleft() for _ in range(n)]
            self.batches.append(n)
            return batch

    def _work(self, r: int) -> None:
        rep = self.replicas[r]
        ports = tuple((self.reach[n], a, b) for n, a, b in rep.route)
        with ThreadPoolExecutor(max_workers=self.micro_batches) as pool:
            while (batch := self._take()) is not None:
                start = time.monotonic()
                items = [p.item for p in batch]
                results = generate_batch(self.client, ports, items, self.micro_batches, pool)
                for p, res in zip(batch, results, strict=True):
                    if isinstance(res, StepFailed):
                        lost = p.attempt > 0
                        self.failed(p, rep.route, res, lost)
                        if not lost:
                            item = dataclasses.replace(p.item, request=f"{p.item.request}.1")
                            self.submit(Pending(p.k, p.kind, item, p.arrived, 1))
                        continue
                    wait = emulated(start - p.arrived)  # queued for a batch
                    res.ttft_s += wait
                    res.e2e_s += wait
                    self.served(p, rep.route, res)
