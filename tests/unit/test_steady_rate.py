"""steady_examples_per_sec (xpdist.task.train.common.steady_rate): the median examples/sec of
the epochs after the first, without the epochs trainer.profile_steps traced in."""

import types

import pytest

from xpdist.task.measure import profile
from xpdist.task.train.common import steady_rate


def _ctx(rates, profile_steps=(), steps_per_epoch=10, first_epoch=1):
    cfg = types.SimpleNamespace(trainer=types.SimpleNamespace(profile_steps=list(profile_steps)))
    return types.SimpleNamespace(cfg=cfg, plan=types.SimpleNamespace(steps_per_epoch=steps_per_epoch),
                                 history=[{"examples_per_sec": r} for r in rates],
                                 history_epochs=list(range(first_epoch, first_epoch + len(rates))))


@pytest.mark.parametrize("steps, steps_per_epoch, epochs", [
    ([], 10, set()),
    ([2, 4], 10, {1}),
    ([32, 34], 10, {4}),  # the advisor's probes: steps 2 to 4 of a 4th epoch
    ([9, 10], 10, {1, 2}),  # across an epoch's end
    ([5, 9], 4, {2, 3}),
])
def test_the_epochs_a_window_traces_in(steps, steps_per_epoch, epochs):
    cfg = types.SimpleNamespace(trainer=types.SimpleNamespace(profile_steps=steps))
    assert profile.traced_epochs(cfg, steps_per_epoch) == epochs


@pytest.mark.parametrize("rates, window, first_epoch, steady", [
    ([100, 400, 410, 900], (), 1, 410),  # epochs 2-4: the first holds the step function's tracing
    ([100, 400, 410, 900], (32, 34), 1, 410),  # epoch 4 traced: the median of epochs 2 and 3
    ([100, 400, 900], (22, 24), 1, 400),  # epoch 3 traced: epoch 2 alone (900 counted before)
    ([100, 400, 900], (2, 4), 1, 900),  # the first epoch traced: left out anyway
    ([100, 900], (12, 14), 1, 900),  # only the traced epoch after the first: it is what there is
    ([100], (2, 4), 1, 100),  # one epoch: its own
    ([300, 400, 900], (52, 54), 4, 400),  # resumed at epoch 4: epoch 6 traced, epoch 4 the first here
])
def test_steady_rate_leaves_out_the_first_epoch_and_the_traced_ones(rates, window, first_epoch, steady):
    assert steady_rate(_ctx(rates, window, first_epoch=first_epoch)) == steady
