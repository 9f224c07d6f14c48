"""A decoder-only transformer cut into pipeline stages, and the stage server of a node."""
