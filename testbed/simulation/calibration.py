"""The virtual clock replayed on a local run: what a real round spent beyond the model.

A local run (real SuperLink and SuperNodes, shaped links, compute stretched to each
profile) records per client and round its measured ``device_time_s`` (training, the
profile's emulated wait, straggler included) and the payload bytes it received and
sent. Replaying the clock's arithmetic on those measurements gives the round as the
clock would count it for exactly that run, its device and link time with or without the
protocol-on-the-link terms (:mod:`testbed.simulation.protocol`: latency legs,
flow-control window, the ServerApp's reply queue); the measured round less the full
replay is what the clock's constant terms (``simulation.protocol_delay_s``,
``startup_s``) stand for. ``bench/simulation.py --calibration`` prints these beside the
virtual rounds, and the constants' defaults are read off local runs this way
(docs/results/calibration.md).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from testbed.planner import make_plan
from testbed.simulation.clock import VirtualClock
from testbed.simulation.config import SimulationSpec
from testbed.simulation.links import client_model
from testbed.simulation.protocol import server_queue_end
from testbed.spec.models import Experiment
from testbed.store import RunStore


def per_node(store: RunStore, run_id: str, metric: str) -> dict[tuple[int, str], float]:
    """``metric`` per (round, node) of a run (rows without a round or node left out)."""
    rows = store.metrics(run_id, metric)
    return {
        (int(m.round), str(m.node)): m.value
        for m in rows
        if m.round is not None and m.node is not None and m.value is not None
    }


@dataclass(frozen=True)
class Replay:
    """The clock's rounds on a local run's measurements (round -> seconds).

    Attributes
    ----------
    link_s : dict of int to float
        Device + link only: the slowest client's exchange.
    full_s : dict of int to float
        With the protocol-on-the-link terms, the round ending when the ServerApp has
        handled every reply; the constant terms (``protocol_delay_s``, ``startup_s``)
        left out.
    """

    link_s: dict[int, float]
    full_s: dict[int, float]


def replay(store: RunStore, run_id: str, exp: Experiment) -> Replay:
    """The clock replayed on a local run of ``exp``, per round.

    Per client: its exchange on :class:`VirtualClock` (the node's link from the plan, no
    faults) with its measured ``device_time_s`` as the device time and the payload bytes
    it received and sent, once without and once with the spec's protocol-on-the-link
    terms (``exp.simulation`` or their defaults). Rounds without a ``device_time_s`` row
    are absent.
    """
    plan = make_plan(exp)
    models = {n.name: client_model(n, plan.experiment.links.mode) for n in plan.clients}
    pids = {n.name: n.partition_id or 0 for n in plan.clients}
    protocol = (exp.simulation or SimulationSpec()).protocol_model()
    bare = VirtualClock(models, deadline_s=float("inf"), seed=plan.seed)
    full = VirtualClock(models, deadline_s=float("inf"), seed=plan.seed, protocol=protocol)
    down = per_node(store, run_id, "bytes_received")
    up = per_node(store, run_id, "bytes_sent")
    link: dict[int, list[float]] = defaultdict(list)
    arrivals: dict[int, list[float]] = defaultdict(list)
    for (rnd, node), device_s in sorted(per_node(store, run_id, "device_time_s").items()):
        compute_s = device_s / bare.model(node).stretch  # the clock stretches it back
        args = (node, pids.get(node, 0), rnd, 0.0, compute_s, int(down.get((rnd, node), 0)),
                int(up.get((rnd, node), 0)))  # fmt: skip
        link[rnd].append(bare.exchange(*args).seconds)
        arrivals[rnd].append(full.exchange(*args).seconds)
    return Replay(
        {rnd: max(ts) for rnd, ts in link.items()},
        {rnd: server_queue_end(ts, protocol.server_reply_s) for rnd, ts in arrivals.items()},
    )
