"""Time dilation (kernel.dilation, testbed.dilation): every clock of a run is stretched by
TDF and every clock figure is recorded in emulated time (the end-to-end parity of TDF 1
and TDF 4 runs: tests/test_time_dilation_e2e.py)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from kernel import dilation
from nodes.device_control import stretch
from testbed.emulation.link import LinkParams, LinkSchedule
from testbed.emulation.proxy import ShapingProxy
from testbed.emulation.relay import Bucket
from testbed.store import RunStore
from tests.test_device_stretch import record_sleeps

TDF = 4.0
#: Liveness: how long a wait for something due within 0.2 s may take on a loaded host.
WAIT_S = 10.0


@pytest.fixture
def tdf4(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setenv(dilation.ENV, str(TDF))
    return TDF


def test_the_factor_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(dilation.ENV, raising=False)
    assert dilation.tdf() == 1.0
    with dilation.dilated(2.5):
        assert dilation.tdf() == 2.5 and dilation.wall(2.0) == 5.0
        assert dilation.emulated(5.0) == 2.0
    assert dilation.tdf() == 1.0  # restored
    monkeypatch.setenv(dilation.ENV, "0.5")
    with pytest.raises(ValueError, match=dilation.ENV):
        dilation.tdf()


def test_stretch_waits_tdf_times_the_device_time_and_returns_emulated_time(
    tdf4: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept = record_sleeps(monkeypatch)  # the waits asked for (a loaded host overruns them)
    # 0.05 s of CPU on a device as fast as this host: 0.05 emulated s = 0.2 wall s
    assert stretch(real_s=0.05, speed_factor=1.0, cpu_s=0.05) == pytest.approx(0.05)
    assert slept == [pytest.approx(0.15)]  # 0.2 - 0.05 already spent
    # a device 3x faster than this host fits under TDF 4: 0.05 / 3 emulated s
    assert stretch(real_s=0.05, speed_factor=3.0, cpu_s=0.05) == pytest.approx(0.05 / 3)
    assert slept[1:] == [pytest.approx(0.05 / 3 * tdf4 - 0.05)]  # 0.0667 - 0.05
    # one faster than TDF cannot be emulated: its time is the wall time / TDF
    assert stretch(real_s=0.05, speed_factor=8.0, cpu_s=0.05) == pytest.approx(0.05 / tdf4)
    assert len(slept) == 2  # no wait


def test_link_values_are_shaped_on_the_wall_clock() -> None:
    p = LinkParams(bandwidth_mbps=8.0, latency_ms=10.0, jitter_ms=2.0, loss_pct=1.0)
    w = p.on_wall_clock(4.0)
    assert (w.bandwidth_mbps, w.latency_ms, w.jitter_ms, w.loss_pct) == (2.0, 40.0, 8.0, 1.0)
    assert LinkParams().on_wall_clock(4.0).bandwidth_mbps is None  # unlimited stays so
    assert p.on_wall_clock(1.0) is p


def _transfer_s(port: int, n: int) -> float:
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(b"x" * n)
        got = 0
        while got < n:
            got += len(c.recv(65536))
    return time.monotonic() - t0


def test_a_proxy_link_lasts_tdf_times_longer_on_the_wall(tdf4: float) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    n = 25_000

    def echo() -> None:
        conn, _ = server.accept()
        with conn:
            buf = b""
            while len(buf) < n:
                buf += conn.recv(65536)
            conn.sendall(buf)

    import threading

    threading.Thread(target=echo, daemon=True).start()
    params = LinkParams(bandwidth_mbps=4.0, latency_ms=20.0)
    proxy = ShapingProxy("d", "127.0.0.1", server.getsockname()[1], params)
    port = proxy.start()
    try:
        wall_s = _transfer_s(port, n)
        assert proxy.params == params  # what is reported stays the emulated value
        shaped = proxy._shaper.params  # what the shaper applies: the wall clock's
    finally:
        proxy.stop()
        server.close()
    assert shaped == params.on_wall_clock(tdf4)
    # emulated: connect RTT + request RTT + 2 x n bytes at 4 Mbit/s = 0.08 + 0.1 s; on
    # the wall TDF x that, less what each way's full bucket lets through at once (a
    # loaded host only adds time: judged from below)
    ideal = 2 * params.rtt_s + 2 * n * 8 / 4e6
    rate = shaped.rate_bytes_per_s
    assert rate is not None
    burst_s = Bucket(rate, 0.0).depth / rate
    assert wall_s >= tdf4 * ideal - 2 * burst_s, (wall_s, ideal)


def test_a_schedule_segment_starts_tdf_times_later(tdf4: float) -> None:
    a, b = LinkParams(latency_ms=1), LinkParams(latency_ms=2)
    proxy = ShapingProxy("s", "127.0.0.1", 9, a)
    proxy.start()
    try:
        t0 = time.monotonic()
        proxy.run_schedule(LinkSchedule([(0.0, a), (0.05, b)]), t0)
        deadline = t0 + WAIT_S
        while not proxy.counters()["changes"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.params == b
        [change] = proxy.counters()["changes"]
        t_start = proxy._state.t_start  # the origin of the change's t_s
    finally:
        proxy.stop()
    # 0.05 emulated s = 0.2 wall s: due then, as recorded, and not applied before
    due = t_start + change["t_s"] - change["lag_ms"] / 1e3
    assert due - t0 == pytest.approx(0.05 * tdf4, abs=1e-6)
    assert change["lag_ms"] >= 0 and change["params"] == b.to_dict()


def test_the_store_keeps_clock_metrics_in_emulated_time(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create_run("r", "x", seed=0, backend="local")
    assert store.set_time_dilation("r", tdf=4.0, chosen="spec") == 4.0
    store.add_metric("r", "round_duration_s", 8.0, round=1)
    store.add_metric("r", "train_cpu_s", 8.0, round=1, node="a")  # the host's work: as is
    store.add_metric("r", "global_acc", 0.5, round=1)
    again = store.tagged("fl")  # another connection reads the factor from the event
    again.add_metric("r", "device_time_s", 2.0, round=1, node="a")
    # a resumed run keeps the factor it started with
    assert again.set_time_dilation("r", tdf=2.0, chosen="spec") == 4.0
    got = {m.name: m.value for m in store.metrics("r")}
    assert got == {
        "round_duration_s": 2.0,
        "train_cpu_s": 8.0,
        "global_acc": 0.5,
        "device_time_s": 0.5,
    }
    store.create_run("plain", "x", seed=0, backend="local")
    store.add_metric("plain", "round_duration_s", 8.0, round=1)
    assert store.metrics("plain", "round_duration_s")[0].value == 8.0


def test_chaos_timers_fire_on_the_dilated_clock(tdf4: float) -> None:
    from testbed.chaos import ChaosEngine

    engine = ChaosEngine.__new__(ChaosEngine)
    engine.timers, engine._seq = [], iter(range(10))
    fired: list[float] = []
    t0 = time.time()
    engine.later(0.05, lambda: fired.append(time.time() - t0))
    deadline = t0 + WAIT_S
    while not fired and time.time() < deadline:
        due = engine.timers[0][0]
        if due <= time.time():
            engine.timers.pop()[2]()
        time.sleep(0.01)
    assert fired and fired[0] >= 0.2 - 0.01  # 0.05 emulated s x TDF 4


def _spec(tmp_path: Path, tdf: str, workload: str = "fl") -> Path:
    fl = "fl: {dataset: {name: digits}, model: {name: cnn}, rounds: 1}"
    fn = (
        "functions: {duration_s: 2, functions: [{name: f, module: matmul, "
        "arrivals: {rate_rps: 2}}]}"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: d\n"
        f"time_dilation: {tdf}\n"
        "fleet: {nodes: [{id: c, tier: cloud, profile: cloud-gpu},"
        " {id: e, tier: edge, profile: rpi5, profile_mix: {rpi5: 1, fog-server: 1}}]}\n"
        f"workload: {{{fl if workload == 'fl' else fn}}}\n"
    )
    return spec


def test_auto_takes_the_fastest_profile_and_validate_says_so(tmp_path: Path) -> None:
    from testbed.dilation import host_speed_profiles, resolve
    from testbed.spec.loader import load_spec

    exp = load_spec(_spec(tmp_path, "auto"))
    d = resolve(exp)
    assert (d.tdf, d.chosen, d.fastest) == (1.3, "auto", ("cloud-gpu", 1.3))
    assert host_speed_profiles(exp, 1.0) == {"cloud-gpu": 1.3, "fog-server": 1.2}
    assert host_speed_profiles(exp, d.tdf) == {}
    res = _cli("validate", str(_spec(tmp_path, "auto")))
    assert res.exit_code == 0 and "time dilation: TDF 1.3 (auto)" in res.output, res.output


def _cli(*args: str):  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from testbed import cli

    return CliRunner().invoke(cli.app, list(args))


def test_a_workload_without_a_dilated_clock_is_refused_naming_the_field(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text("name: c\ntime_dilation: 2\nworkload:\n  compress: {}\n")
    res = _cli("validate", str(spec))
    assert res.exit_code == 2
    assert "time_dilation" in res.output and "workload.compress" in res.output, res.output
    assert _cli("validate", str(_spec(tmp_path, "2", workload="functions"))).exit_code == 0
    res = _cli("validate", str(_spec(tmp_path, "0.5")))
    assert res.exit_code == 2 and "time_dilation" in res.output, res.output


def test_notes_say_the_factor_and_who_runs_at_host_speed(tmp_path: Path) -> None:
    from testbed.backends import get_backend
    from testbed.spec.loader import load_spec

    local, sim = get_backend("local"), get_backend("simulation")
    slow = local.notes([load_spec(_spec(tmp_path, "1"))])
    assert any("cloud-gpu (1.3)" in n and "host speed" in n for n in slow), slow
    fast = local.notes([load_spec(_spec(tmp_path, "auto"))])
    assert "time dilation: TDF 1.3 (auto)" in fast and not any("host speed" in n for n in fast)
    ignored = sim.notes([load_spec(_spec(tmp_path, "auto"))])
    assert any(n.startswith("ignored: time_dilation") for n in ignored), ignored


def test_the_timelines_throughput_is_per_emulated_second() -> None:
    from testbed.controller.timeline import key_summary

    rows = [
        {"workload": "llm_pipeline", "name": "llm_e2e_ms", "value": 100.0, "t_s": t}
        for t in (0.0, 4.0, 8.0)
    ]
    tags: list[dict[str, object]] = [{}, {}, {}]
    assert key_summary(rows, tags)[0]["per_s"] == 0.25  # 2 rows in 8 wall s
    assert key_summary(rows, tags, tdf=4.0)[0]["per_s"] == 1.0  # ... in 2 emulated s
