"""When the export's preload (MLflow's import, xpdist/task/export.py) may start during training
(xpdist.task.runner.preload_may_start): a long first epoch, or enough training left at the pace
of the epochs after the first; never from the first epoch's time alone, which holds the tracing.
Whether it pays is measured, not asserted here: docs/performance.md."""

import types

import pytest

from xpdist.task.runner import PRELOAD_EPOCH_S, PRELOAD_LEFT_S, preload_may_start


def _ctx(epochs, times, last_epoch=None):
    history = [{"epoch_time_s": t} for t in times]
    return types.SimpleNamespace(cfg=types.SimpleNamespace(trainer=types.SimpleNamespace(epochs=epochs)),
                                 history=history, last_epoch=last_epoch if last_epoch is not None else len(times) or None)


@pytest.mark.parametrize("epochs, times, last_epoch, starts", [
    (30, [], None, False),  # training has not finished an epoch
    (2, [PRELOAD_EPOCH_S], None, True),  # a long first epoch: as before
    (30, [PRELOAD_EPOCH_S - 1], None, False),  # the first epoch's time holds the tracing: no pace from it
    (30, [2.0, 0.3], None, True),  # 28 epochs left of 0.3 s: 8.4 s to overlap
    (10, [2.0, 0.3], None, False),  # 8 left: 2.4 s, shorter than the preload's own cost
    (14, [2.0, 1.0], 12, False),  # a resumed run: 2 epochs left (last_epoch), not 12 (its history)
    (100, [2.0, 1.0], None, True),  # the long training of short epochs that paid the import at its end
])
def test_the_preload_starts_when_the_training_left_can_hold_it(epochs, times, last_epoch, starts):
    assert preload_may_start(_ctx(epochs, times, last_epoch)) is starts


def test_the_threshold_is_on_the_training_left_not_on_the_epoch_count():
    pace = 0.25
    just_enough = int(PRELOAD_LEFT_S / pace) + 2  # epochs left after the second one, at this pace
    assert preload_may_start(_ctx(just_enough, [1.0, pace]))
    assert not preload_may_start(_ctx(just_enough - 1, [1.0, pace]))
