"""The fog node of semantic offload: channel (Sionna), demultiplexer, task heads.

``python -m nodes.semantic.fog --dir D --port P [--speed-factor F]`` loads every scheme
of ``D`` (:class:`nodes.semantic.model.OffloadModel`) and the channel block of every
sample, listens on ``127.0.0.1:P`` and answers each request frame
``{scheme, index}`` + the device's bytes with ``{preds, decode_s, decode_device_s}``:
the predicted class per task, the measured decode time on this host and the fog's
device time (stretched to its profile). Noise is drawn from Sionna's random source,
seeded once (``meta.json``'s seed + 1).
"""

from __future__ import annotations

import argparse
import json
import socketserver
import threading
import time
from pathlib import Path
from typing import Any

from nodes.device_control import stretch
from nodes.semantic.wire import recv_frame, send_frame

__all__ = ["main"]


class _Fog:
    """What the handler threads share; decoding is serialised (one fog device)."""

    def __init__(self, folder: Path, speed_factor: float) -> None:
        import torch

        from nodes.semantic.model import OffloadModel
        from radio.runtime import resolve_runtime

        torch.set_num_threads(1)
        meta = json.loads((folder / "meta.json").read_text())
        resolve_runtime(int(meta["seed"]) + 1, "cpu")
        self.models = {s: OffloadModel(folder, s) for s in meta["schemes"]}
        self.h: Any = torch.load(folder / "channel.pt", weights_only=True)
        self.snr_db = float(meta["snr_db"])
        self.speed_factor = speed_factor
        self.lock = threading.Lock()

    def answer(self, header: dict[str, Any], payload: bytes) -> dict[str, Any]:
        i = int(header["index"])
        with self.lock:
            t0 = time.perf_counter()
            preds = self.models[str(header["scheme"])].decode(  # the device link's SNR now
                payload, self.h[i : i + 1], float(header.get("snr_db", self.snr_db))
            )
            real = time.perf_counter() - t0
            device = stretch(real, self.speed_factor)
        return {"preds": preds, "decode_s": real, "decode_device_s": device}


def _handler(fog: _Fog) -> type[socketserver.BaseRequestHandler]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            while True:
                frame = recv_frame(self.request)
                if frame is None:
                    return
                header, payload, _ = frame
                send_frame(self.request, fog.answer(header, payload))

    return Handler


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main(argv: list[str] | None = None) -> None:
    """Serve until terminated."""
    ap = argparse.ArgumentParser(prog="python -m nodes.semantic.fog")
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--speed-factor", type=float, default=1.0)
    args = ap.parse_args(argv)
    fog = _Fog(args.dir, args.speed_factor)
    from nodes.agent import bind_host

    with _Server((bind_host(), args.port), _handler(fog)) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()
