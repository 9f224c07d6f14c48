"""The protocol-timing shim changes exactly Flower's hard-coded polling waits (issue 15).

``fast`` mode must shorten the SuperNode's 3 s empty-pull wait, its 0.5 s wait for a
ClientApp reply, the ServerApp grid's 3 s reply poll and the object-pull back-off, and
nothing else; ``flower`` mode must leave Flower's modules as they are. Flower's own
functions run here where that can be done without a fleet (``_push_messages``,
``HttpGrid.send_and_receive``, ``pull_objects``), with ``time.sleep`` recorded instead
of slept.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import flwr.supercore.inflatable.inflatable_utils as inflatable
import flwr.superlink.grid.http_grid as http_grid
import flwr.supernode.start_client_internal as sci
import pytest
from flwr.proto.message_pb2 import ObjectTree
from flwr.supercore.inflatable.inflatable_utils import ObjectUnavailableError

from nodes.agent import supernode_command
from nodes.fl import timing
from nodes.fl.timing import (
    CLIENTAPP,
    SERVERAPP,
    SUPERNODE,
    WAITS,
    TimeShim,
    install,
    main,
    uninstall,
)

FLOWER_BACKOFF = {"initial_backoff": 1, "backoff_cap": 10, "max_tries_per_object": 500}


class Stop(Exception):
    """Ends a Flower loop under test."""


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Every ``time.sleep`` duration (s) requested while a test runs; none is slept."""
    calls: list[float] = []
    monkeypatch.setattr(time, "sleep", calls.append)
    yield calls
    for component in WAITS:
        uninstall(component)


def _push_messages_wait(slept: list[float]) -> list[float]:
    """Run Flower's ``_push_messages`` until its first reply check after one wait."""
    answers = iter([[]])  # first check: no reply yet -> Flower waits

    def get_messages_legacy(is_reply: bool) -> list[object]:
        for a in answers:
            return a
        raise Stop

    state = SimpleNamespace(get_messages_legacy=get_messages_legacy)
    with pytest.raises(Stop):
        sci._push_messages(state, None, None, None)  # type: ignore[arg-type]
    return slept


def _grid_wait(slept: list[float]) -> list[float]:
    """Run Flower's ``HttpGrid.send_and_receive``: one empty poll, then the reply."""
    polls = iter([[], [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id="m1"))]])
    grid = SimpleNamespace(
        push_messages=lambda messages: ["m1"], pull_messages=lambda ids: next(polls)
    )
    replies = http_grid.HttpGrid.send_and_receive(grid, [], timeout=60.0)  # type: ignore[arg-type]
    assert len(list(replies)) == 1
    return slept


def test_flower_mode_runs_flower_untouched(slept: list[float]) -> None:
    assert sci.time is time and http_grid.time is time
    assert _push_messages_wait(slept) == [0.5]
    assert _grid_wait([]) == [] and slept == [0.5, 3]
    cmd = supernode_command("127.0.0.1:1", 2, {"partition-id": 0})
    assert cmd[0].endswith("flower-supernode") and "nodes.fl.timing" not in cmd


def test_fast_mode_shortens_the_supernode_waits(slept: list[float]) -> None:
    shims = install(SUPERNODE)
    assert set(shims) == {"flwr.supernode.start_client_internal"}
    shim = shims["flwr.supernode.start_client_internal"]
    assert sci.time is shim and http_grid.time is time  # only the SuperNode's module
    # exactly these functions' waits are listed: the empty pull, the reply wait and
    # the wait for a reply's objects (a function nested in _push_messages)
    [nested] = [c for c in sci._push_messages.__code__.co_consts if hasattr(c, "co_name")]
    assert nested.co_name == "yield_object_contents"
    assert shim.waits == {
        sci.start_client_internal.__code__: (3.0, 0.1),
        sci._push_messages.__code__: (0.5, 0.02),
        nested: (0.5, 0.02),
    }
    assert _push_messages_wait(slept) == [0.02] and shim.changed == 1


def _push_reply(slept: list[float]) -> list[tuple[str, bytes]]:
    """Run Flower's ``_push_messages`` on a reply whose one object is stored only on the
    second look (the ClientApp still pushing it); return what was pushed."""
    meta = SimpleNamespace(
        group_id="", run_id=1, message_type="train", message_id="m", reply_to_message_id="r"
    )
    contents = iter([b"", b"x"])
    store = SimpleNamespace(
        get_object_tree=lambda _id: ObjectTree(object_id="o"),
        get=lambda _id: next(contents),
        delete=lambda _id: None,
    )
    state = SimpleNamespace(
        get_messages_legacy=lambda is_reply: [SimpleNamespace(metadata=meta)],
        get_message_processing_duration=lambda message_id: 0.1,
        delete_messages=lambda message_ids: None,
    )
    pushed: list[tuple[str, bytes]] = []
    sci._push_messages(
        state,  # type: ignore[arg-type]
        store,  # type: ignore[arg-type]
        lambda message, tree, runtime: ({"o"}, "session"),
        lambda run_id, session, obj_id, content: pushed.append((obj_id, content)),
    )
    return pushed


def test_fast_mode_shortens_the_wait_for_reply_objects(slept: list[float]) -> None:
    assert _push_reply(slept) == [("o", b"x")] and slept == [0.5]  # Flower's own wait
    slept.clear()
    install(SUPERNODE)
    assert _push_reply(slept) == [("o", b"x")] and slept == [0.02]


def test_task_ready_wakes_the_executor() -> None:
    """In fast mode the SuperNode writes to the executor's pipe before Flower's
    ``_push_messages`` (its task then holds every object), and Flower's call follows."""
    original = sci._push_messages
    r, w = os.pipe()
    os.set_blocking(r, False)
    calls: list[tuple[object, ...]] = []
    try:
        sci._push_messages = lambda *args: calls.append(args)  # type: ignore[assignment]
        timing.notify_task_ready(w)
        timing.notify_task_ready(w)  # wrapping twice is a no-op
        sci._push_messages("state", "store", "send", "push")  # type: ignore[arg-type]
        assert os.read(r, 100) == b"!" and calls == [("state", "store", "send", "push")]
        os.close(r)  # an executor gone: Flower still carries on
        sci._push_messages(1, 2, 3, 4)  # type: ignore[arg-type]
        assert len(calls) == 2
    finally:
        sci._push_messages = original
        os.close(w)


def test_fast_mode_shortens_the_grid_reply_poll(slept: list[float]) -> None:
    install(SERVERAPP)
    assert isinstance(http_grid.time, TimeShim) and sci.time is time
    assert _grid_wait(slept) == [0.1]
    assert http_grid.time.time() == pytest.approx(time.time(), abs=1.0)  # rest is time's


def test_other_waits_and_values_pass_through(slept: list[float]) -> None:
    shim = install(SUPERNODE)["flwr.supernode.start_client_internal"]

    def elsewhere() -> None:  # same module's time, another function: unchanged
        sci.time.sleep(3)

    elsewhere()
    shim.sleep(3)  # called from this test, not from Flower's function: unchanged
    assert slept == [3, 3] and shim.changed == 0
    rule = shim.waits.pop(sci._push_messages.__code__)
    shim.waits[elsewhere.__code__] = rule  # the rule matches its value only
    sci.time.sleep(0.5)
    elsewhere()
    assert slept == [3, 3, 0.5, 3]


def test_a_large_fleets_supernodes_wait_longer_never_longer_than_flower(
    slept: list[float],
) -> None:
    """60 SuperNodes pulling every 0.1 s saturate the SuperLink: a node's fast waits
    grow with the fleet beyond 4 nodes, and stop at Flower's own."""
    assert timing.fleet_scale(1) == timing.fleet_scale(4) == 1.0
    assert timing.fleet_scale(60) == 15.0
    shim = install(SUPERNODE, timing.fleet_scale(60))["flwr.supernode.start_client_internal"]
    assert shim.waits[sci.start_client_internal.__code__] == (3.0, 1.5)
    assert shim.waits[sci._push_messages.__code__] == (0.5, 0.3)
    backoff = inflatable.pull_objects.__kwdefaults__
    assert backoff["initial_backoff"] == 0.3 and backoff["backoff_cap"] == 3.0
    install(SUPERNODE, timing.fleet_scale(400))  # (again, bigger: replaces the values)
    assert shim.waits[sci.start_client_internal.__code__] == (3.0, 3.0)
    assert backoff is not inflatable.pull_objects.__kwdefaults__
    assert inflatable.pull_objects.__kwdefaults__["backoff_cap"] == 10
    assert inflatable.pull_objects.__kwdefaults__["max_tries_per_object"] is None


def test_install_is_idempotent_and_uninstall_restores(slept: list[float]) -> None:
    first = install(SUPERNODE)
    assert install(SUPERNODE) == first
    uninstall(SUPERNODE)
    assert sci.time is time


def test_a_changed_flower_release_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    wait = timing.Wait("flwr.supernode.start_client_internal", "_push_messages", 7.0, 0.1)
    monkeypatch.setitem(WAITS, "probe", (wait,))
    with pytest.raises(RuntimeError, match="no longer waits 7.0 s"):
        install("probe")
    gone = timing.Wait("flwr.supernode.start_client_internal", "no_such_function", 3.0, 0.1)
    monkeypatch.setitem(WAITS, "probe", (gone,))
    with pytest.raises(RuntimeError, match="no_such_function not found"):
        install("probe")
    with pytest.raises(ValueError, match="component must be one of"):
        install("superlink")
    assert sci.time is time and inflatable.pull_objects.__kwdefaults__["backoff_cap"] == 10


def test_shim_command_and_entry_point() -> None:
    cmd = supernode_command("127.0.0.1:1", 2, {"partition-id": 0}, protocol_timing="fast")
    assert cmd[:4] == [sys.executable, "-m", "nodes.fl.timing", "fast"]
    assert cmd[4] == "flower-supernode" and cmd[5:7] == ["--insecure", "--superlink"]
    with pytest.raises(ValueError, match="protocol_timing must be one of"):
        timing.shim_command(sys.executable, "slow", "flower-supernode", [])
    assert main(["fast", "flwr"]) == 2  # only the scripts it knows
    # the shim starts Flower's own console entry point with the arguments given
    out = subprocess.run(
        [sys.executable, "-m", "nodes.fl.timing", "fast", "flower-supernode", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "--superlink" in out.stdout


def _pull_twice_unavailable() -> float:
    """Seconds Flower's ``pull_objects`` takes for an object unavailable twice."""
    answers = iter([ObjectUnavailableError("o"), ObjectUnavailableError("o"), b"x"])

    def pull(object_id: str) -> bytes:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    t0 = time.perf_counter()
    assert inflatable.pull_objects(["o"], pull) == {"o": b"x"}
    return time.perf_counter() - t0


def test_object_pull_backoff_flower_and_fast() -> None:
    for fn in (inflatable.pull_objects, inflatable.pull_and_inflate_object_from_tree):
        assert {k: fn.__kwdefaults__[k] for k in FLOWER_BACKOFF} == FLOWER_BACKOFF
    try:
        install(CLIENTAPP)
        for fn in (inflatable.pull_objects, inflatable.pull_and_inflate_object_from_tree):
            assert fn.__kwdefaults__["initial_backoff"] == 0.02
            assert fn.__kwdefaults__["backoff_cap"] == 0.2
            assert fn.__kwdefaults__["max_tries_per_object"] is None
            assert fn.__kwdefaults__["max_time"] == 7200  # still bounded as in Flower
        assert sci.time is time and http_grid.time is time  # no polling wait touched
        # fast: 0.02 s + 0.04 s of back-off; Flower's: 1 s + 2 s (+-20 %), at least 2.4 s
        assert _pull_twice_unavailable() < 1.5  # (generous: a loaded host's overhead)
    finally:
        uninstall(CLIENTAPP)
    fn = inflatable.pull_objects
    assert {k: fn.__kwdefaults__[k] for k in FLOWER_BACKOFF} == FLOWER_BACKOFF


@pytest.mark.parametrize("mode", ["flower", "fast"])
def test_the_server_node_superexec_polls_often_in_fast_mode(mode: str, tmp_path: Path) -> None:
    """Flower's SuperExec checks for a submitted run every 1 s unless its own setting
    says otherwise; fast mode sets it to 0.1 s, flower mode leaves Flower's default."""
    from testbed.backends.local import SUPEREXEC_POLL_ENV, LocalBackend
    from testbed.planner import make_plan
    from testbed.spec.loader import parse_spec

    spec = parse_spec(
        "name: t\nfleet:\n  nodes:\n    - {id: cloud, tier: cloud}\n"
        f"    - {{id: edge, tier: edge}}\nworkload:\n  fl: {{protocol_timing: {mode}}}\n"
    )
    env = LocalBackend(make_plan(spec), tmp_path)._server_env()
    assert env.get(SUPEREXEC_POLL_ENV) == ("0.1" if mode == "fast" else None)


def test_a_supernodes_flower_jitter_is_seeded_by_its_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's heartbeat intervals and retry back-offs come from ``random``: the SuperNode
    that :func:`timing.main` starts draws the same ones on every run for the same node
    (so a long-cut node goes offline at the same point of a run on every backend) and
    different ones for another node."""
    import random

    from flwr.common.constant import HEARTBEAT_RANDOM_RANGE

    draws: list[list[float]] = []

    class Script:  # stands in for flower-supernode's entry point: Flower's own draws
        def load(self) -> object:
            return lambda: draws.append([random.uniform(*HEARTBEAT_RANDOM_RANGE) for _ in range(5)])

    monkeypatch.setattr(timing, "entry_points", lambda **_kw: (Script(),))
    monkeypatch.setattr("nodes.fl.register.install", lambda: None)  # (not Flower's, here)
    monkeypatch.setattr(sys, "argv", sys.argv[:])
    for name in ("sat-1", "sat-1", "sat-2"):
        random.seed()  # whatever state the process (a zygote's fork) came with
        config = f'partition-id=0 node-name="{name}" tier="space"'
        assert timing.main(["flower", "flower-supernode", "--node-config", config]) == 0
    assert draws[0] == draws[1]
    assert draws[0] != draws[2]
