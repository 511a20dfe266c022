"""The suite's grouping reaches pytest-xdist's scheduler (tests/conftest.py, scripts/test.sh).

Each test file is one group, and the tests of the shared services another, so that a worker
makes a module's shared runs, and starts PostgreSQL, the MLflow server and the network
namespaces, once. pytest-xdist carries a test's group in its node id; where it cannot
(pytest 9.2, pytest-dev/pytest-xdist#1386) the tests are dealt out one by one, nothing fails,
and the suite takes minutes longer. These tests fail then.
"""

import pytest


@pytest.fixture
def loadgroup(request) -> None:
    # pytest-xdist's workers see --dist as "no" and this flag instead.
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("runs under scripts/test.sh's --dist loadgroup")


def test_this_test_carries_its_files_group(request, loadgroup):
    assert request.node.nodeid.endswith("@tests/unit/test_suite_groups.py"), request.node.nodeid


def test_every_test_of_this_worker_carries_its_group(request, loadgroup):
    for item in request.session.items:
        group = item.get_closest_marker("xdist_group").args[0]
        assert item.nodeid.endswith(f"@{group}"), item.nodeid
