"""Emulated link accuracy and overhead, per mode (proxy, netem), measured in one run.

A transfer = connect, send SIZE bytes, half-close, wait for a 1-byte acknowledgement
that the receiver sends after reading everything. Ideal time = size / bandwidth +
2 RTT (the TCP handshake, then the last byte's one-way trip and the acknowledgement's).
Prints measured / ideal per (size, bandwidth, latency, loss); the goal is within +-5 %
where the ideal time is over 1 s (loss rows are measured against the same loss-free
ideal: they show what loss costs in each mode). Then the proxy's (and netem's)
throughput on an unlimited link vs a direct loopback connection, same run.

    python bench/links.py [--modes proxy,netem] [--full] [--max-ideal-s 60] [--json out.json]

By default combinations whose ideal time exceeds --max-ideal-s are skipped, and 1 % loss
rows only at 0 and 20 ms; --full runs everything. Each transfer is cut at
--timeout-s (reported as "timeout").
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.emulation.link import LinkParams  # noqa: E402
from testbed.emulation.proxy import ShapingProxy  # noqa: E402

SIZES_MB = (1, 10, 100)
BANDWIDTHS_MBPS = (1, 10, 100)
LATENCIES_MS = (0, 20, 200)
LOSS_PCT = 1.0
_CHUNK = 1 << 20


def _sink(ls: socket.socket) -> None:
    """Accept forever; per connection read to EOF, then answer one byte."""
    while True:
        try:
            conn, _ = ls.accept()
        except OSError:
            return

        def handle(c: socket.socket = conn) -> None:
            with c, contextlib.suppress(OSError):
                while c.recv(_CHUNK):
                    pass
                c.sendall(b"k")

        threading.Thread(target=handle, daemon=True).start()


def transfer(
    host: str, port: int, size: int, timeout_s: float, make_sock: Callable[[], socket.socket]
) -> float | None:
    """Seconds from connect to the acknowledgement, or None past ``timeout_s``."""
    block = b"\0" * _CHUNK
    sock = make_sock()
    sock.settimeout(timeout_s)
    t0 = time.monotonic()
    try:
        with sock:
            sock.connect((host, port))
            left = size
            while left:
                left -= sock.send(block[: min(left, _CHUNK)])
            sock.shutdown(socket.SHUT_WR)
            if sock.recv(1) != b"k":
                raise ConnectionError("no acknowledgement")
    except TimeoutError:
        return None
    return time.monotonic() - t0


@contextlib.contextmanager
def proxy_link(params: LinkParams) -> Iterator[tuple[str, int, Callable[[], socket.socket]]]:
    ls = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=_sink, args=(ls,), daemon=True).start()
    proxy = ShapingProxy("bench", "127.0.0.1", ls.getsockname()[1], params)
    port = proxy.start()
    try:
        yield "127.0.0.1", port, socket.socket
    finally:
        proxy.stop()
        ls.close()


@contextlib.contextmanager
def netem_link(params: LinkParams) -> Iterator[tuple[str, int, Callable[[], socket.socket]]]:
    from testbed.emulation.netem import NetemLink, in_netns

    link = NetemLink("bench", params, index=250)
    addr = link.start()
    try:
        with in_netns(link.server_netns):
            ls = socket.create_server((addr, 0))
        threading.Thread(target=_sink, args=(ls,), daemon=True).start()

        def client() -> socket.socket:
            with in_netns(link.client_netns):
                return socket.socket()

        yield addr, ls.getsockname()[1], client
        ls.close()
    finally:
        link.stop()


@contextlib.contextmanager
def direct_link(params: LinkParams) -> Iterator[tuple[str, int, Callable[[], socket.socket]]]:
    ls = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=_sink, args=(ls,), daemon=True).start()
    try:
        yield "127.0.0.1", ls.getsockname()[1], socket.socket
    finally:
        ls.close()


MODES = {"proxy": proxy_link, "netem": netem_link}


def combos(full: bool, max_ideal_s: float) -> list[tuple[int, float, float, float, float]]:
    """(size_bytes, bandwidth_mbps, latency_ms, loss_pct, ideal_s) to run."""
    out = []
    for loss, lat, bw, mb in itertools.product(
        (0.0, LOSS_PCT), LATENCIES_MS, BANDWIDTHS_MBPS, SIZES_MB
    ):
        size = mb * 10**6
        ideal = size * 8 / (bw * 1e6) + 2 * (2 * lat / 1000)
        if not full and (ideal > max_ideal_s or (loss and lat > 20)):
            continue
        out.append((size, float(bw), float(lat), loss, ideal))
    return out


def throughput_mb_s(mode: Callable, size: int) -> float:
    with mode(LinkParams()) as (host, port, make):
        dt = transfer(host, port, size, 120.0, make)
    assert dt is not None
    return size / dt / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="proxy,netem")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--max-ideal-s", type=float, default=60.0)
    ap.add_argument("--timeout-s", type=float, default=90.0)
    ap.add_argument("--overhead-mb", type=int, default=200)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            ap.error(f"--modes: unknown mode {m!r}; allowed: {sorted(MODES)}")
    if "netem" in modes:
        from testbed.emulation.netem import support

        info = support()
        print(f"netem support: {info}")
        if not info["ok"]:
            print(f"netem mode skipped: {info['reason']}")
            modes.remove("netem")
    rows = []
    todo = combos(args.full, args.max_ideal_s)
    print(f"{'mode':6} {'size':>6} {'bw':>9} {'lat':>7} {'loss':>5} {'ideal s':>8} "
          f"{'measured s':>10} {'ratio':>6}")  # fmt: skip
    for mode in modes:
        for size, bw, lat, loss, ideal in todo:
            params = LinkParams(bandwidth_mbps=bw, latency_ms=lat, loss_pct=loss)
            with MODES[mode](params) as (host, port, make):
                dt = transfer(host, port, size, max(args.timeout_s, 3 * ideal), make)
            ratio = None if dt is None else dt / ideal
            rows.append({"mode": mode, "size_mb": size / 1e6, "bandwidth_mbps": bw,
                         "latency_ms": lat, "loss_pct": loss, "ideal_s": ideal,
                         "measured_s": dt, "ratio": ratio})  # fmt: skip
            shown = "timeout" if dt is None else f"{dt:10.3f}"
            print(f"{mode:6} {size / 1e6:4.0f}MB {bw:5.0f}Mbps {lat:5.0f}ms {loss:4.1f}% "
                  f"{ideal:8.3f} {shown:>10} {'' if ratio is None else f'{ratio:6.3f}'}",
                  flush=True)  # fmt: skip
    size = args.overhead_mb * 10**6
    direct = throughput_mb_s(direct_link, size)
    overhead = {"direct_mb_s": direct}
    print(f"\nunlimited link, {args.overhead_mb} MB: direct loopback {direct:.1f} MB/s")
    for mode in modes:
        mb_s = throughput_mb_s(MODES[mode], size)
        overhead[f"{mode}_mb_s"] = mb_s
        print(f"  {mode:6} {mb_s:8.1f} MB/s   ratio {mode}/direct = {mb_s / direct:.3f}")
    accurate = [r for r in rows if r["ideal_s"] > 1 and not r["loss_pct"] and r["ratio"]]
    for mode in modes:
        within = [r for r in accurate if r["mode"] == mode and abs(r["ratio"] - 1) <= 0.05]
        total = sum(1 for r in accurate if r["mode"] == mode)
        print(f"{mode}: {len(within)}/{total} loss-free rows with ideal > 1 s within +-5 %")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "overhead": overhead}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
