"""``python -m nodes superlink|supernode ...`` is the node entry point (:mod:`nodes.cli`)."""

from nodes.cli import main

main()
