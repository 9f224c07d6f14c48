"""Serve the controller with uvicorn: loopback by default, a token anywhere else."""

from __future__ import annotations

import ipaddress
from pathlib import Path


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to expose the controller beyond this machine without a token.

    Raises
    ------
    ValueError
        ``host`` is not a loopback address and ``token`` is empty.
    """
    if not is_loopback(host) and not token:
        raise ValueError(
            f"--host {host}: binding beyond loopback needs a token "
            "(--token or TESTBED_TOKEN); clients send 'Authorization: Bearer <token>'"
        )


def serve(
    store_root: str | Path,
    experiments_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    log_level: str = "warning",
) -> None:
    """Run the controller until interrupted (SIGINT/SIGTERM stop its launched runs)."""
    import uvicorn

    from testbed.controller.app import create_app

    check_bind(host, token)
    app = create_app(store_root, experiments_dir, token=token or None)
    # ws="none": the API has no WebSocket routes, and uvicorn's websockets protocol
    # imports deprecated modules that print a warning at the dashboard's start
    uvicorn.run(app, host=host, port=port, log_level=log_level, ws="none")
