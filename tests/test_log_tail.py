"""``testbed.procs.log_tail``: what a node's start failure quotes from its log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.procs import free_port, log_tail, wait_port


def test_a_process_that_dies_before_its_port_is_explained_by_its_log(tmp_path: Path) -> None:
    """A real process writes its error and exits before listening: the port wait fails
    and the log's last lines (not its first) say why."""
    log = tmp_path / "logs" / "n-1.log"
    log.parent.mkdir()
    code = "import sys\nfor i in range(5000): print('noise', i)\nsys.exit('SuperNode failed: bind')"
    with open(log, "w") as out:
        p = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT)
        with pytest.raises(RuntimeError, match="exited with code 1"):
            wait_port(free_port(), 30, p)
    tail = log_tail(log, lines=3)
    assert tail.startswith(f"the end of {log}:")
    assert tail.splitlines()[1:] == ["  noise 4998", "  noise 4999", "  SuperNode failed: bind"]


def test_long_lines_are_cut_and_missing_or_empty_logs_say_so(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("x" * 1000 + "\n\n\n")
    assert log_tail(log, width=10).splitlines()[1] == "  " + "x" * 10
    empty = tmp_path / "e.log"
    empty.write_text("\n \n")
    assert log_tail(empty) == f"{empty} is empty"
    assert log_tail(tmp_path / "none.log") == f"no log at {tmp_path / 'none.log'}"
