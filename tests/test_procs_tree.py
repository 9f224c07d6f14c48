"""``ProcGroup.tree`` from one process-table map (testbed/procs.py): the same tree as
psutil's own walk, found with one look at the table for any number of groups."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from testbed.procs import ProcGroup, children_map

NESTED = "sleep 30 & (sleep 30 & wait) & wait"  # a child, and a grandchild in a subshell


def test_a_tree_from_a_children_map_is_psutils_tree(tmp_path: Path) -> None:
    group = ProcGroup()
    for name in ("a", "b"):
        group.start(name, ["bash", "-c", NESTED], tmp_path / f"{name}.log")
    try:
        deadline = time.monotonic() + 10
        while min(len(group.tree(n)) for n in "ab") < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        kids = children_map()
        for name in ("a", "b"):
            walked = sorted(q.pid for q in group.tree(name))
            assert len(walked) == 4  # bash, sleep, subshell, its sleep
            assert sorted(q.pid for q in group.tree(name, kids)) == walked
            assert abs(group.rss_mb(name, kids) - group.rss_mb(name)) < 1.0
    finally:
        group.stop_all(timeout_s=2)


def test_listening_ports_are_picked_below_the_ephemeral_range_never_twice() -> None:
    """The runner picks its servers' ports before they bind them; a port from the
    kernel's ephemeral range could meanwhile become an outgoing connection's local
    port (48 node containers on the host network: "address already in use")."""
    from testbed.procs import LISTEN_PORTS, ephemeral_range, free_port

    low = ephemeral_range()[0]
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(LISTEN_PORTS[0] <= p < low for p in ports), (low, sorted(ports)[-3:])
    with socket.socket() as s:  # each is free to listen on
        s.bind(("127.0.0.1", ports[-1]))
        s.listen()
