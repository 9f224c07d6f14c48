"""Latency, bandwidth, handover and compressed schedules of space links; a real shaping
proxy playing a pass."""

from __future__ import annotations

import math
import socket
import threading
import time

import numpy as np
import pytest

from testbed.emulation.proxy import ShapingProxy
from testbed.space.budget import fspl_db, rate_mbps
from testbed.space.config import LinkBudget
from testbed.space.orbits import C_M_S, WGS84_A_M, slant_range_m
from testbed.space.schedule import SpaceModel

H_M = 550e3
#: Geometry at a refined window edge: range error from a 1 ms edge tolerance, m.
EDGE_RANGE_TOL_M = 30.0
#: Schedule latency vs geometry (0.01 ms rounding + midpoint sampling), ms.
SCHED_LAT_TOL_MS = 0.02
#: Schedule changes applied later than due: median / worst, ms (a loaded 2-core host
#: delays the proxy's event loop now and then; bench/space.py reports the distribution).
LAG_MEDIAN_TOL_MS = 20.0
LAG_MAX_TOL_MS = 250.0


def _lat_ms(range_m: float, proc_ms: float = 2.0) -> float:
    return range_m / C_M_S * 1e3 + proc_ms


def test_latency_at_zenith_vs_min_elevation(equatorial) -> None:
    spec = equatorial()
    model = SpaceModel(spec, ["sat"], horizon_s=20000.0)
    w = model.windows[0]
    site = model.sites["gw"]
    pos = model.con.ecef_m(np.array([w.start_s, w.end_s]), [0])[0]
    el, rng = site.look(pos)
    np.testing.assert_allclose(el, 10.0, atol=2e-3)
    edge = slant_range_m(10.0, H_M, WGS84_A_M)  # exact: planar geometry on the equator
    np.testing.assert_allclose(rng, edge, atol=EDGE_RANGE_TOL_M)
    assert w.max_elevation_deg > 89.9  # an overhead pass
    sched = model.link_schedule("sat")
    served = [(t, p) for t, p in sched.segments if not p.partitioned]
    lat = np.array([p.latency_ms for _, p in served])
    assert lat.min() == pytest.approx(_lat_ms(H_M), abs=SCHED_LAT_TOL_MS)  # zenith: 3.83 ms
    # first served segment starts at the window edge; its value is sampled a few seconds
    # in, so between the edge latency and the zenith latency, near the edge
    first_t, first = served[0]
    assert first_t == pytest.approx(w.start_s / spec.time_compression)
    assert _lat_ms(H_M) < first.latency_ms <= _lat_ms(edge) + SCHED_LAT_TOL_MS
    assert first.latency_ms > _lat_ms(edge) - 0.2
    assert _lat_ms(edge) / _lat_ms(H_M) > 1.8  # 7.4 ms vs 3.8 ms
    # bandwidth follows the budget: highest at zenith
    bw = np.array([p.bandwidth_mbps for _, p in served])
    assert bw[np.argmin(lat)] == bw.max() > first.bandwidth_mbps


def test_link_budget_by_hand() -> None:
    b = LinkBudget(max_rate_mbps=None)
    d = 1000e3
    assert fspl_db(d, 8.2e9) == pytest.approx(
        20 * math.log10(4 * math.pi * d * 8.2e9 / 299_792_458.0)
    )
    cn0 = 10.0 + 20.0 - float(fspl_db(d, 8.2e9)) - 3.0 + 228.5991
    snr = 10 ** ((cn0 - 10 * math.log10(50e6) - 3.0) / 10)
    assert float(rate_mbps(b, d)) == pytest.approx(0.9 * 50 * math.log2(1 + snr), rel=1e-9)
    capped = LinkBudget(max_rate_mbps=50.0)
    assert float(rate_mbps(capped, 600e3)) == 50.0
    assert float(rate_mbps(b, 1e9)) == b.min_rate_mbps  # far away: the floor


def test_relay_is_a_bent_pipe(equatorial) -> None:
    spec = equatorial(
        ground_stations=[
            {"name": "gw", "lat_deg": 0.0, "lon_deg": 8.0, "min_elevation_deg": 10.0},
            {
                "name": "term",
                "lat_deg": 0.0,
                "lon_deg": 0.0,
                "min_elevation_deg": 10.0,
                "kind": "terminal",
            },
        ],
        relays=[{"node": "buoy", "terminal": "term", "gateway": "gw"}],
    )
    model = SpaceModel(spec, [], horizon_s=7000.0)
    assert model.nodes == ["buoy"]
    by = {w.station: w for w in model.windows}
    passes = model.passes("buoy")
    # served only while both see the satellite: the satellite moves east, so from the
    # gateway's rise to the terminal's set
    assert passes[0]["start_s"] == pytest.approx(by["gw"].start_s)
    assert passes[0]["end_s"] == pytest.approx(by["term"].end_s)
    tl = [s for s in model.timeline("buoy") if s.route is not None]
    s = tl[len(tl) // 2]
    mid = 0.5 * (s.start_s + s.end_s)
    pos = model.con.ecef_m(np.array([mid]), [0])[0]
    r1 = model.sites["term"].look(pos)[1][0]
    r2 = model.sites["gw"].look(pos)[1][0]
    assert model.params(s).latency_ms == pytest.approx(_lat_ms(r1 + r2), abs=0.006)


def test_handover_nearest_vs_longest_pass(equatorial) -> None:
    stations = [
        {"name": "west", "lat_deg": 0.0, "lon_deg": 0.0, "min_elevation_deg": 10.0},
        {"name": "east", "lat_deg": 0.0, "lon_deg": 6.0, "min_elevation_deg": 10.0},
    ]
    near = SpaceModel(equatorial(ground_stations=stations), ["sat"], horizon_s=7000.0)
    longest = SpaceModel(
        equatorial(ground_stations=stations, handover="longest-pass"), ["sat"], horizon_s=7000.0
    )
    win = {w.station: w for w in near.windows}
    assert win["west"].start_s < win["east"].start_s < win["west"].end_s  # overlap
    p_near, p_long = near.passes("sat"), longest.passes("sat")
    assert [p["stations"] for p in p_near[:2]] == [["west"], ["east"]]
    assert [p["stations"] for p in p_long[:2]] == [["west"], ["east"]]
    # longest-pass keeps west until it sets; nearest switches when east gets closer,
    # which happens halfway between the stations: before west sets
    assert p_long[0]["end_s"] == pytest.approx(win["west"].end_s)
    assert p_near[0]["end_s"] < win["west"].end_s - 60.0
    # nearest really is the nearest at every served interval
    for s in near.timeline("sat"):
        if s.route is None:
            continue
        mid = np.array([0.5 * (s.start_s + s.end_s)])
        pos = near.con.ecef_m(mid, [0])[0]
        ranges = {
            n: near.sites[n].look(pos)[1][0]
            for n in ("west", "east")
            if win[n].start_s <= mid[0] < win[n].end_s
        }
        assert s.route.stations[0] == min(ranges, key=ranges.get)


def test_compression_scales_wall_time_only(equatorial) -> None:
    k1, k2 = 20.0, 100.0
    a = SpaceModel(equatorial(time_compression=k1), ["sat"], horizon_s=20000.0 / k1)
    b = SpaceModel(equatorial(time_compression=k2), ["sat"], horizon_s=20000.0 / k2)
    assert a.duration_s == b.duration_s == 20000.0
    sa, sb = a.link_schedule("sat").segments, b.link_schedule("sat").segments
    assert len(sa) == len(sb) > 10
    for (ta, pa), (tb, pb) in zip(sa, sb, strict=True):
        assert ta * k1 == pytest.approx(tb * k2) and pa == pb  # same orbit, same values
    # out of view = partitioned, in view = not
    for w_start, w_end in [(w.start_s, w.end_s) for w in a.windows]:
        sched = a.link_schedule("sat")
        assert sched.at((w_start - 30.0) / k1).partitioned
        assert not sched.at((w_start + 30.0) / k1).partitioned
        assert sched.at((w_end + 30.0) / k1).partitioned
    rec = a.record()
    assert rec["time_compression"] == k1 and rec["windows"][0]["wall_start_s"] == pytest.approx(
        rec["windows"][0]["start_s"] / k1
    )


def _echo(c: socket.socket) -> None:
    with c:
        while data := c.recv(64):
            c.sendall(data)


def _echo_server() -> tuple[socket.socket, int]:
    ls = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return ls, ls.getsockname()[1]


def test_proxy_plays_a_compressed_pass(equatorial) -> None:
    """A real shaping proxy follows the pass: a message sent before the satellite rises
    is held until it rises; schedule changes are applied on time."""
    k = 100.0  # a ~510 s pass plays in ~5 s
    spec = equatorial(time_compression=k)
    model = SpaceModel(spec, ["sat"], horizon_s=80.0)
    w = model.windows[0]
    sched = model.link_schedule("sat")
    ls, port = _echo_server()
    proxy = ShapingProxy("sat", "127.0.0.1", port, sched.at(0.0))
    proxy.start()
    try:
        lead_s = 1.0  # the pass starts 1 s from now
        t0 = time.monotonic() - (w.start_s / k - lead_s)
        proxy.run_schedule(sched, t0)
        rise = t0 + w.start_s / k
        with socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=10) as c:
            c.sendall(b"ping")
            got = c.recv(64)
            arrived = time.monotonic()
        assert got == b"ping"
        rtt_s = 2 * sched.at(w.start_s / k + 0.01).latency_ms / 1e3
        assert rise - 0.01 < arrived < rise + rtt_s + LAG_MAX_TOL_MS / 1e3
        time.sleep(1.0)  # a few in-pass updates
        changes = proxy.counters()["changes"]
        assert len(changes) >= 3
        lags = np.array([ch["lag_ms"] for ch in changes])
        assert np.median(lags) < LAG_MEDIAN_TOL_MS and lags.max() < LAG_MAX_TOL_MS
        assert changes[-1]["params"]["partitioned"] is False
    finally:
        proxy.stop()
        ls.close()
