"""cluster=ray: the addresses of a job's tasks are distinct even when two actors on one node pick
the same free port (engines/_ray_actors.distinct)."""

from __future__ import annotations

from xpdist.core.clusterenv import TaskId
from xpdist.driver.engines._ray_actors import distinct

CHIEF, W0, W1, PS0 = TaskId("chief", 0), TaskId("worker", 0), TaskId("worker", 1), TaskId("ps", 0)


def test_a_task_handed_an_address_already_taken_asks_again_until_it_has_its_own():
    # worker:1 first gets the chief's port, then worker:0's, then one of its own; ps:0 is distinct.
    again = {W1: iter(["10.0.0.1:2002", "10.0.0.1:2003"])}
    asked = []

    def ask_again(task):
        asked.append(task)
        return next(again[task])

    first = {CHIEF: "10.0.0.1:2001", W0: "10.0.0.1:2002", W1: "10.0.0.1:2001", PS0: "10.0.0.2:2001"}
    addresses = distinct(first, ask_again)
    assert addresses == {CHIEF: "10.0.0.1:2001", W0: "10.0.0.1:2002", W1: "10.0.0.1:2003", PS0: "10.0.0.2:2001"}
    assert list(addresses) == [CHIEF, W0, W1, PS0] and asked == [W1, W1]


def test_distinct_addresses_are_kept_without_asking():
    first = {CHIEF: "10.0.0.1:2001", W0: "10.0.0.2:2001"}
    assert distinct(first, lambda task: (_ for _ in ()).throw(AssertionError(f"{task} asked again"))) == first
