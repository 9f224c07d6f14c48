"""Space tier figures: visibility windows vs an independent reference, model build time,
and link-schedule updates applied on time under time compression. One run, same host.

1. Windows of the shipped ISS TLE over four ground stations for ``--days`` days, ours
   (sgp4 + our TEME->ECEF, WGS-84 stations, bisection to 1 ms) vs skyfield on the same
   TLE: (a) ``EarthSatellite.find_events`` (skyfield's frames and event search), (b)
   skyfield's topocentric elevation with the same bisection as ours (frames only).
   Then a Walker shell propagated with sgp4 (``sgp4init``) vs skyfield on the same
   satrecs, and our Keplerian+J2 model vs SGP4 on the same Walker elements (two
   theories: a modelled difference, not an error).
2. Time to build ``experiments/leo_fl.yaml``'s model (windows, handover, schedules) and
   a 200-satellite shell.
3. A real ``ShapingProxy`` plays a space node's compressed schedule for ``--play-s``
   seconds per compression factor: lag of each applied change (applied - due), and a
   probe that pings through the proxy every 20 ms: when traffic first passes after a
   scheduled rise, RTT in a pass vs 2 x the scheduled latency.

    python bench/space.py [--days 2] [--play-s 20] [--factors 10,30,100,300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.emulation.proxy import ShapingProxy  # noqa: E402
from testbed.space.config import SpaceSpec  # noqa: E402
from testbed.space.orbits import Constellation, Site  # noqa: E402
from testbed.space.schedule import SpaceModel  # noqa: E402
from testbed.space.visibility import Window, visibility_windows  # noqa: E402

ISS_TLE = str(ROOT / "experiments" / "tle" / "iss-2014-01-20.tle")
STATIONS = [
    {"name": "bluffton", "lat_deg": 40.8939, "lon_deg": -83.8917, "min_elevation_deg": 10.0},
    {"name": "perth", "lat_deg": -31.95, "lon_deg": 115.86, "alt_m": 20.0},
    {"name": "madrid", "lat_deg": 40.43, "lon_deg": -4.25, "alt_m": 800.0},
    {"name": "singapore", "lat_deg": 1.35, "lon_deg": 103.82, "min_elevation_deg": 5.0},
]


def _stats(d: np.ndarray) -> str:
    d = np.abs(d) * 1e3
    return (
        f"median {np.median(d):7.1f} ms  p95 {np.percentile(d, 95):7.1f} ms  max {d.max():7.1f} ms"
    )


def _skyfield_sat(con: Constellation, i: int, ts):  # noqa: ANN001, ANN202
    from skyfield.api import EarthSatellite

    if con.tles:
        t = con.tles[i]
        return EarthSatellite(t.line1, t.line2, t.name, ts)
    raise ValueError("no TLE")


def _pairs(secs: np.ndarray, ev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Complete (rise, set) pairs from skyfield's event list (0 rise, 1 culminate, 2 set)."""
    starts, ends, rise = [], [], None
    for t, e in zip(secs, ev, strict=True):
        if e == 0:
            rise = t
        elif e == 2 and rise is not None:
            starts.append(rise)
            ends.append(t)
            rise = None
    return np.array(starts), np.array(ends)


def _match(ours: list[Window], starts: np.ndarray, ends: np.ndarray) -> tuple[list, list, int]:
    """Edge differences (ours - reference, s) of complete windows matched by start within
    60 s, and how many windows on either side found no partner."""
    ds, de, matched = [], [], 0
    mine = [w for w in ours if not (w.clipped_start or w.clipped_end)]
    for w in mine:
        if not len(starts):
            break
        k = int(np.argmin(np.abs(starts - w.start_s)))
        if abs(starts[k] - w.start_s) > 60.0:
            continue
        matched += 1
        ds.append(w.start_s - starts[k])
        de.append(w.end_s - ends[k])
    return ds, de, (len(mine) - matched) + (len(starts) - matched)


def reference_windows(days: float) -> dict:
    """Our windows vs skyfield on the ISS TLE and on a sgp4-propagated Walker shell."""
    from skyfield.api import EarthSatellite, load, wgs84

    ts = load.timescale(builtin=True)
    out: dict = {}
    duration = days * 86400.0
    spec = SpaceSpec.model_validate({"tle_files": [ISS_TLE], "ground_stations": STATIONS})
    con = Constellation(spec)
    t_ours = time.perf_counter()
    ours = visibility_windows(con, [Site.of(g) for g in spec.ground_stations], duration)
    t_ours = time.perf_counter() - t_ours
    sat = _skyfield_sat(con, 0, ts)
    t0 = ts.from_datetime(con.start_utc)
    t1 = ts.from_datetime(con.start_utc + timedelta(seconds=duration))
    all_s, all_e, all_gs, all_ge = [], [], [], []
    missing = 0
    t_ref = time.perf_counter()
    for g in spec.ground_stations:
        topo = wgs84.latlon(g.lat_deg, g.lon_deg, elevation_m=g.alt_m)
        t, ev = sat.find_events(topo, t0, t1, altitude_degrees=g.min_elevation_deg)
        secs = (t - t0) * 86400.0
        mine = [w for w in ours if w.station == g.name]
        ds, de, miss = _match(mine, *_pairs(secs, ev))
        all_s += ds
        all_e += de
        missing += miss

        # (b) skyfield geometry, our bisection: refine each of our edges on skyfield's
        # elevation, from a bracket of +-2 s
        def el_sky(x: np.ndarray, topo=topo) -> np.ndarray:  # noqa: ANN001
            tt = ts.from_datetime(con.start_utc)
            tt = ts.tt_jd(tt.tt + x / 86400.0)
            return (sat - topo).at(tt).altaz()[0].degrees

        for w in mine:
            for edge, rising, acc in ((w.start_s, True, all_gs), (w.end_s, False, all_ge)):
                lo, hi = edge - 2.0, edge + 2.0
                while hi - lo > 1e-3:
                    mid = 0.5 * (lo + hi)
                    above = el_sky(np.array([mid]))[0] >= g.min_elevation_deg
                    if above == rising:
                        hi = mid
                    else:
                        lo = mid
                acc.append(edge - 0.5 * (lo + hi))
    t_ref = time.perf_counter() - t_ref
    out["iss"] = {
        "windows": len([w for w in ours if not (w.clipped_start or w.clipped_end)]),
        "unmatched": missing,
        "find_events_start_s": np.abs(all_s).tolist(),
        "find_events_end_s": np.abs(all_e).tolist(),
        "geometry_start_s": np.abs(all_gs).tolist(),
        "geometry_end_s": np.abs(all_ge).tolist(),
        "ours_s": t_ours,
        "skyfield_s": t_ref,
    }
    print(
        f"\n## ISS TLE (epoch {con.start_utc:%Y-%m-%d %H:%M:%S} UTC), {len(STATIONS)} stations, "
        f"{days:g} days: {out['iss']['windows']} windows, unmatched {missing}"
    )
    print(f"  vs skyfield find_events   start: {_stats(np.array(all_s))}")
    print(f"                            end:   {_stats(np.array(all_e))}")
    print(f"  vs skyfield elevation     start: {_stats(np.array(all_gs))}")
    print(f"    (same bisection)        end:   {_stats(np.array(all_ge))}")
    print(f"  time: ours {t_ours * 1e3:.0f} ms, skyfield (events + bisection) {t_ref:.1f} s")

    # a Walker shell through sgp4init, against skyfield on the very same satrecs
    shell = {
        "planes": 4,
        "sats_per_plane": 5,
        "altitude_km": 550.0,
        "inclination_deg": 53.0,
        "phasing": 1,
        "propagator": "sgp4",
    }
    base = {"ground_stations": STATIONS[2:3], "start_utc": "2025-03-20T00:00:00Z"}
    spec_w = SpaceSpec.model_validate(base | {"shells": [shell]})
    con_w = Constellation(spec_w)
    g = spec_w.ground_stations[0]
    ours_w = visibility_windows(con_w, [Site.of(g)], 86400.0)
    topo = wgs84.latlon(g.lat_deg, g.lon_deg, elevation_m=g.alt_m)
    t0 = ts.from_datetime(con_w.start_utc)
    t1 = ts.from_datetime(con_w.start_utc + timedelta(days=1))
    ws, we, wmiss = [], [], 0
    for i, name in enumerate(con_w.names):
        satrec = con_w._groups[0][0].satrecs[i]  # type: ignore[attr-defined]
        s = EarthSatellite.from_satrec(satrec, ts)
        t, ev = s.find_events(topo, t0, t1, altitude_degrees=g.min_elevation_deg)
        secs = (t - t0) * 86400.0
        mine = [w for w in ours_w if w.satellite == name]
        ds, de, miss = _match(mine, *_pairs(secs, ev))
        ws += ds
        we += de
        wmiss += miss
    print(
        f"\n## Walker 53:20/4/1 550 km, sgp4init, vs skyfield on the same satrecs, 1 day, "
        f"madrid: {len(ours_w)} windows, unmatched {wmiss}"
    )
    print(f"  start: {_stats(np.array(ws))}\n  end:   {_stats(np.array(we))}")
    # two theories on the same elements: Keplerian + J2 secular vs SGP4
    spec_k = SpaceSpec.model_validate(base | {"shells": [shell | {"propagator": "keplerian"}]})
    ours_k = visibility_windows(Constellation(spec_k), [Site.of(g)], 86400.0)
    ks, ke, kmiss = [], [], 0
    for name in con_w.names:
        a = [w for w in ours_w if w.satellite == name]
        b = [w for w in ours_k if w.satellite == name]
        ds, de, miss = _match(b, np.array([w.start_s for w in a]), np.array([w.end_s for w in a]))
        ks += ds
        ke += de
        kmiss += miss
    print(f"  modelled: Keplerian+J2 vs SGP4, same elements: start {_stats(np.array(ks))}")
    print(f"                                                 end   {_stats(np.array(ke))}")
    out["walker"] = {
        "windows": len(ours_w),
        "unmatched": wmiss,
        "start_s": np.abs(ws).tolist(),
        "end_s": np.abs(we).tolist(),
        "kepler_vs_sgp4_start_s": np.abs(ks).tolist(),
        "kepler_vs_sgp4_end_s": np.abs(ke).tolist(),
        "kepler_unmatched": kmiss,
    }
    return out


def build_times() -> dict:
    """Wall time to build the run's model: windows, handover timelines, schedules."""
    import yaml

    out = {}
    raw = yaml.safe_load((ROOT / "experiments" / "leo_fl.yaml").read_text())
    cases = {
        "leo_fl.yaml (4 sats, 3 nodes + 1 relay, 1800 s x 30)": (
            SpaceSpec.model_validate(raw["space"]),
            ["sat-1", "sat-2", "sat-3"],
        ),
        "200 sats (10x20, 87 deg), 20 nodes + 1 relay, 1800 s x 30": (
            SpaceSpec.model_validate(
                raw["space"]
                | {
                    "shells": [
                        {
                            "planes": 10,
                            "sats_per_plane": 20,
                            "altitude_km": 550,
                            "inclination_deg": 87,
                            "phasing": 1,
                        }
                    ]
                }
            ),
            [f"sat-{i}" for i in range(1, 21)],
        ),
    }
    print("\n## Model build (propagation, windows, handover, schedules)")
    for label, (spec, nodes) in cases.items():
        t = time.perf_counter()
        model = SpaceModel(spec, nodes)
        segs = sum(len(model.link_schedule(n).segments) for n in model.nodes)
        dt = time.perf_counter() - t
        out[label] = {"s": dt, "windows": len(model.windows), "segments": segs}
        print(f"  {label}: {dt:.2f} s, {len(model.windows)} windows, {segs} segments")
    return out


def _echo_server() -> tuple[socket.socket, int]:
    ls = socket.create_server(("127.0.0.1", 0))

    def echo(c: socket.socket) -> None:
        with c:
            while data := c.recv(64):
                c.sendall(data)

    def serve() -> None:
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return ls, ls.getsockname()[1]


def play(factor: float, play_s: float) -> dict:
    """Play the busiest ``play_s`` seconds of a space node's schedule through a proxy."""
    spec = SpaceSpec.model_validate(
        {
            "shells": [
                {"planes": 1, "sats_per_plane": 1, "altitude_km": 550.0, "inclination_deg": 0.0}
            ],
            "ground_stations": [{"name": "gw", "lat_deg": 0.0, "lon_deg": 0.0}],
            "start_utc": "2025-03-20T00:00:00Z",
            "time_compression": factor,
        }
    )
    model = SpaceModel(spec, ["sat"], horizon_s=max(4 * 6200.0 / factor, play_s + 10))
    sched = model.link_schedule("sat")
    # start 1 s before the first rise
    first = model.windows[0].start_s / factor
    offset = first - 1.0
    rises = [w.start_s / factor - offset for w in model.windows]
    ls, port = _echo_server()
    proxy = ShapingProxy("sat", "127.0.0.1", port, sched.at(offset))
    proxy.start()
    probes: list[tuple[float, float]] = []  # (send time, answer time), s after t0
    stop = threading.Event()
    t0 = time.monotonic()

    def probe() -> None:
        """One byte at a time; a byte held by a partition is answered after the rise."""
        with socket.create_connection(("127.0.0.1", proxy.listen_port)) as c:
            c.settimeout(0.1)
            while not stop.is_set():
                ts = time.monotonic()
                c.sendall(b"p")
                while not stop.is_set():
                    try:
                        c.recv(1)
                    except TimeoutError:
                        continue
                    probes.append((ts - t0, time.monotonic() - t0))
                    break
                time.sleep(0.02)

    try:
        proxy.run_schedule(sched, t0 - offset)
        th = threading.Thread(target=probe, daemon=True)
        th.start()
        time.sleep(play_s)
        stop.set()
        counters = proxy.counters()
    finally:
        proxy.stop()
        ls.close()
    lags = np.array([c["lag_ms"] for c in counters["changes"]])
    # first answer after each rise (the probe was sent before it and held): answer - rise
    onset = []
    for r in rises:
        if r > play_s:
            break
        answered = [a for t, a in probes if t < r <= a + 0.5]
        if answered:
            onset.append(min(a for a in answered if a >= r - 0.5) - r)
    in_pass = []
    for t, a in probes:
        p, q = sched.at(t + offset), sched.at(a + offset)
        if not (p.partitioned or q.partitioned):
            in_pass.append((a - t) * 1e3 - 2 * p.latency_ms)
    res = {
        "factor": factor,
        "changes": len(lags),
        "lag_ms": lags.tolist(),
        "onset_s": onset,
        "rtt_excess_ms": in_pass,
        "passes": sum(r <= play_s for r in rises),
    }
    print(
        f"  x{factor:<5g} {len(lags):5d} changes  lag median {np.median(lags):5.2f} ms  "
        f"p99 {np.percentile(lags, 99):6.2f} ms  max {lags.max():7.2f} ms | "
        f"{res['passes']} rises, first echo after rise "
        f"{', '.join(f'{x * 1e3:.1f}' for x in onset)} ms | RTT - 2 x latency in pass: "
        f"median {np.median(in_pass):.2f} ms (n={len(in_pass)})"
    )
    return res


def held_byte_control(latency_ms: float = 7.3, repeats: int = 3) -> list[float]:
    """The same held byte with the partition lifted by hand (``set_params``), no
    schedule: time from lifting to the echo, ms."""
    from testbed.emulation.link import LinkParams

    ls, port = _echo_server()
    out = []
    try:
        for _ in range(repeats):
            proxy = ShapingProxy("ctl", "127.0.0.1", port, LinkParams(partitioned=True))
            proxy.start()
            try:
                with socket.create_connection(("127.0.0.1", proxy.listen_port)) as c:
                    time.sleep(0.3)
                    c.sendall(b"p")
                    time.sleep(0.3)
                    t = time.monotonic()
                    proxy.set_params(LinkParams(bandwidth_mbps=100.0, latency_ms=latency_ms))
                    c.recv(1)
                    out.append((time.monotonic() - t) * 1e3)
            finally:
                proxy.stop()
    finally:
        ls.close()
    print(
        f"  control: partition lifted by hand, {latency_ms} ms one way: echo after "
        f"{', '.join(f'{x:.1f}' for x in out)} ms"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--play-s", type=float, default=20.0)
    ap.add_argument("--factors", default="10,30,100,300")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    res: dict = {"reference": reference_windows(args.days), "build": build_times()}
    print(f"\n## Schedules played by a ShapingProxy ({args.play_s:g} s wall each)")
    res["play"] = [play(float(f), args.play_s) for f in args.factors.split(",")]
    res["held_byte_control_ms"] = held_byte_control()
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
