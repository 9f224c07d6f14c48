"""testbed/cause.py: causes that are not tracebacks (bench/fuzz_runs.py found a failed
run whose only error was Flower's CLI panel)."""

from __future__ import annotations

from pathlib import Path

from testbed.cause import find_cause, scan_log

DATA = Path(__file__).resolve().parent / "data" / "cause"


def test_a_flwr_run_error_panel_is_the_cause(tmp_path: Path) -> None:
    """``flwr run`` that could not reach the SuperLink (a superlink-restart fault before
    round 1, at submission) writes only a rich panel; the run failed without a reason.
    The log is the fuzzed run's own. Mutation tried: the panel not read (cause None)."""
    log = (DATA / "flwr-run-superlink-unavailable.log").read_text()
    hit = scan_log(log.splitlines())
    assert hit is not None and hit.line == 2
    assert hit.message == (
        "Error: Connection to the SuperLink is unavailable. Please check your network "
        "connection and 'address' in the SuperLink connection configuration."
    )
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "flwr-run.log").write_text(log)
    cause = find_cause(tmp_path, {}, [], server="cloud")
    assert cause is not None and cause.message == hit.message
    assert (cause.node, cause.log, cause.line) == ("cloud", "logs/flwr-run.log", 2)
    # a panel that is not an error, or an empty one, is no cause
    assert scan_log(["╭─ Info ─╮", "│ all good │", "╰────╯"]) is None
    assert scan_log(["╭─ Error ─╮", "╰────╯"]) is None
