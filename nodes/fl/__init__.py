"""Flower app of the testbed: ServerApp, ClientApp, warm executor (imports nothing heavy)."""
