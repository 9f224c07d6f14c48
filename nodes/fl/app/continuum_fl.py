"""Entry module of the FAB: re-exports the testbed's ServerApp and ClientApp."""

from nodes.fl.client_app import app as client_app
from nodes.fl.server_app import app as server_app

__all__ = ["client_app", "server_app"]
