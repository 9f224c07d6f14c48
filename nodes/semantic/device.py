"""An edge device of semantic offload: the K task encoders, then the bytes to the fog.

``python -m nodes.semantic.device --dir D --fog HOST:PORT --first I --count N --out F
[--interval S] [--snr-steps JSON --clock-origin T]`` runs, for every scheme of ``D`` in
turn, inferences ``I .. I+N-1`` (one sample of each task): encode (measured, then
stretched to the device's profile), send the bytes over one TCP connection through the
node's link, wait for the fog's answer. One JSON line per inference goes to ``F`` as it
completes: ``scheme``, ``index``, ``preds``, ``encode_s`` (measured),
``encode_device_s`` (stretched), ``round_trip_s`` (send to answer: link both ways + the
fog's device time), ``decode_device_s`` (the fog's), ``link_s`` (round trip minus the
fog's device time), ``e2e_s`` (encode device time + round trip), ``bytes_up`` /
``bytes_down`` (frames on the wire, headers included) and ``payload_bytes`` (the
representation alone). With ``--snr-steps`` (``[[at_s, snr_db], ...]``, the device
link's modelled SNR schedule, ``at_s`` after ``--clock-origin``, an epoch time) each
request asks the fog for the channel SNR of its link at that time (``snr_db`` in the
line); without, the fog's own.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

from nodes.device_control import stretch
from nodes.semantic.wire import recv_frame, send_frame

__all__ = ["main", "run_scheme"]


def snr_now(steps: list[list[float]], origin: float) -> float | None:
    """The SNR [dB] of the last step of ``steps`` (``[at_s, snr_db]``) begun by now."""
    t = time.time() - origin
    begun = [snr for at, snr in steps if at <= t]
    return begun[-1] if begun else (steps[0][1] if steps else None)


def run_scheme(
    folder: Path, scheme: str, fog: tuple[str, int], indices: range, speed: float, out: IO[str],
    interval_s: float = 0.0, snr: tuple[list[list[float]], float] = ([], 0.0),
) -> None:
    """Offload inferences ``indices`` with ``scheme``; one JSON line each to ``out``;
    ``interval_s``: time between the starts of two inferences, s (0: back to back);
    ``snr``: the link's SNR steps and their clock origin (see the module)."""
    from nodes.semantic.model import OffloadModel

    model = OffloadModel(folder, scheme)
    inputs = np.load(folder / "inputs.npz")
    xs_all = [inputs[f"x{k}"] for k in range(model.k)]
    with socket.create_connection(fog, timeout=120) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        for n, i in enumerate(indices):
            time.sleep(max(0.0, start + n * interval_s - time.perf_counter()))
            t0 = time.perf_counter()
            payload = model.encode([x[i : i + 1] for x in xs_all])
            enc = time.perf_counter() - t0
            enc_device = stretch(enc, speed)
            t1 = time.perf_counter()
            header: dict[str, Any] = {"scheme": scheme, "index": i}
            if (snr_db := snr_now(*snr)) is not None:
                header["snr_db"] = snr_db
            up = send_frame(sock, header, payload)
            frame = recv_frame(sock)
            if frame is None:
                raise ConnectionError("the fog closed the connection")
            answer, _, down = frame
            rtt = time.perf_counter() - t1
            rec: dict[str, Any] = {
                "scheme": scheme, "index": i, "preds": answer["preds"], "encode_s": enc,
                "encode_device_s": enc_device, "round_trip_s": rtt,
                "decode_device_s": answer["decode_device_s"],
                "link_s": max(0.0, rtt - answer["decode_device_s"]),
                "e2e_s": enc_device + rtt, "bytes_up": up, "bytes_down": down,
                "payload_bytes": len(payload), "t": time.time(),
            } | ({"snr_db": header["snr_db"]} if "snr_db" in header else {})
            out.write(json.dumps(rec) + "\n")
            out.flush()


def main(argv: list[str] | None = None) -> None:
    """Run every scheme's inferences, then exit."""
    import torch

    ap = argparse.ArgumentParser(prog="python -m nodes.semantic.device")
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--fog", required=True, help="host:port of the fog through the link")
    ap.add_argument("--first", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--speed-factor", type=float, default=1.0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--interval", type=float, default=0.0, help="s between inferences")
    ap.add_argument("--snr-steps", default="[]", help="JSON [[at_s, snr_db], ...]")
    ap.add_argument("--clock-origin", type=float, default=0.0, help="epoch s of at_s = 0")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    host, port = args.fog.rsplit(":", 1)
    meta = json.loads((args.dir / "meta.json").read_text())
    done = _done(args.out)
    with args.out.open("a") as out:
        for scheme in meta["schemes"]:
            todo = range(args.first + done.get(scheme, 0), args.first + args.count)
            run_scheme(args.dir, scheme, (host, int(port)), todo, args.speed_factor, out,
                       args.interval, (json.loads(args.snr_steps), args.clock_origin))


def _done(path: Path) -> dict[str, int]:
    """Inferences already answered per scheme (a restarted device goes on from there)."""
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            counts[rec["scheme"]] = counts.get(rec["scheme"], 0) + 1
    return counts


if __name__ == "__main__":
    main()
