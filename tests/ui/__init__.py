"""Dashboard tests. pytest imports this folder as the package ``ui`` (``tests/`` goes on
``sys.path`` first), which shadows the dashboard's own ``ui`` package: its modules
(``ui.client``, ``ui.views...``) are looked up in the checkout's ``ui/`` folder too, so
that the pages under test are this checkout's (not those of an editable install of
another checkout, which the installed finder would otherwise supply)."""

from pathlib import Path

__path__.append(str(Path(__file__).resolve().parents[2] / "ui"))
