"""Shared fixtures: repo paths and a helper that finds processes a run left behind."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from testbed.reaper import processes_in

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root() -> Path:
    return ROOT


def processes_under(folder: Path) -> list[psutil.Process]:
    """Live processes whose FLWR_HOME or command line points inside ``folder``."""
    return processes_in(folder)  # what the run's watchdog looks for, too


#: Slow tests that ``make test-e2e`` runs alone, after the rest ran on two workers
#: (marked ``serial`` here, in one place): each checks the whole host or a figure that
#: another fleet beside it would move. Key: a file, or a file's test; value: why.
SERIAL = {
    "tests/test_orphans.py": "no namespace, cgroup or process may appear on the host",
    "tests/test_resume.py": "the host's node cgroups before and after a SIGKILL",
    "tests/test_restart_at_submission.py": "a SuperLink restart timed against the submission",
    "tests/test_time_dilation_e2e.py": "emulated round times at TDF 1 and 4 must agree",
    "tests/test_together_e2e.py": "functions' SLOs beside FL on one fleet",
    "tests/functions": "SLO attainment and promotions follow measured latencies",
    "tests/fl/test_round_deadline.py": "a round ends within its deadline plus a tolerance",
    "tests/space/test_space_fl.py": "a satellite's view windows on the wall clock",
    "tests/ui/test_browser_e2e.py": "page load times and the lag of the live page",
    "tests/ui/test_fleet_groups_browser.py": "a browser's page times",
    "tests/ui/test_timeline_page.py": "a browser's page times",
    "tests/simulation/test_ray_cluster.py": "a Ray cluster started with ray start",
    "tests/test_fleet_e2e.py::test_fast_round_within_compute_plus_one_second": "a round's time",
    "tests/test_faults.py::test_straggler_slows_compute_by_factor": "device time / CPU time",
    "tests/test_faults.py::test_partition_stops_traffic_for_its_duration": "a partition's seconds",
    "tests/test_faults.py::test_degrade_link_live_then_restore": "throughput on a shaped link",
    "tests/test_faults.py::test_fleet_over_netem_links": "no run's namespace left on the host",
    "tests/test_faults.py::test_superlink_restart_mid_run_loses_nothing": (
        "the restarted SuperLink's nodes back within the round's deadline"
    ),
    "tests/simulation/test_simulation_e2e.py::test_same_records_and_accuracy_as_local": (
        "no Ray process left on the host"
    ),
}


#: The long tests CI runs (marked ``ci``): ``make test-e2e`` runs the slow ones, ``make
#: test-docker`` those of tests/docker (docker/e2e.sh, ``DOCKER_SUITE=ci``). Each is here
#: for a part of the product no faster test starts for real, and none judges wall-clock
#: margins, so that a busy machine cannot change the verdict (issue 39: CI in under 35
#: minutes). Every other slow test runs in ``make test-e2e-all`` and ``make
#: test-docker-all``. Key: a file, or a file's test; value: what it covers.
CI = {
    "tests/test_fleet_e2e.py::test_teardown_on_ctrl_c": "Ctrl-C leaves nothing",
    "tests/test_fleet_e2e.py::test_two_concurrent_runs_do_not_collide": "two runs at once",
    "tests/test_faults.py::test_crash_at_round_2_of_5": "a scheduled fault and its statuses",
    "tests/test_faults.py::test_fleet_over_netem_links": "kernel-shaped links (netem)",
    "tests/test_orphans.py": "every ending of a run, then the host (ORPHAN_RUNS=4 in CI)",
    "tests/space/test_space_fl.py": "a satellite pass against the rounds",
    "tests/fl/test_userapp.py::test_quickstart_numpy_with_a_crash_and_a_partition": (
        "a user's own Flower app, unchanged, with faults"
    ),
    "tests/simulation/test_faults_e2e.py": "the simulation backend (Ray) on virtual time",
    "tests/radio/test_mmwave_fl_fleet.py": "FL over a Sionna mmWave link with TT-Edge",
    "tests/ui/test_controller_api.py": "the controller's launches, real runs",
    "tests/ui/test_browser_e2e.py": "the dashboard in a real browser",
    # tests/docker (make test-docker in CI; the rest in make test-docker-all)
    "tests/docker/test_docker_limits.py": "profiles as engine limits, clear refusals",
    "tests/docker/test_docker_backend.py::"
    "test_limits_from_the_profile_and_faults_through_the_engine": (
        "a fleet of containers with faults through the engine"
    ),
    "tests/docker/test_docker_backend.py::test_ctrl_c_removes_every_container": (
        "Ctrl-C leaves no container"
    ),
    "tests/docker/test_swarm.py::test_validate_refuses_what_the_swarm_cannot_do": (
        "the swarm's preflight"
    ),
    "tests/docker/test_swarm.py::"
    "test_ctrl_c_removes_every_service_and_container_on_both_engines": (
        "a fleet across two engines, and its teardown"
    ),
    "tests/docker/test_swarm.py::test_a_workloads_own_servers_run_on_their_engine": (
        "workloads' servers placed on the second engine"
    ),
}


def _keys(item: pytest.Item) -> tuple[str, ...]:
    path = item.nodeid.split("::")[0]
    return (item.nodeid.split("[")[0], path, path.rsplit("/", 1)[0])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`SERIAL` ``serial`` and those of :data:`CI` ``ci``."""
    for item in items:
        keys = _keys(item)
        if any(k in SERIAL for k in keys):
            item.add_marker(pytest.mark.serial)
        if any(k in CI for k in keys):
            item.add_marker(pytest.mark.ci)
