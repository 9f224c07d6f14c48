"""``python -m testbed`` is the ``testbed`` CLI."""

from testbed.cli import main

main()
