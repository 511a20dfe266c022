"""xpdist/driver/hydra_private.py against the installed Hydra: the basic sweeper's split of a
sweep and a failed job's exception. Fails on the Hydra release that changes either."""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus

from tests.helpers import compose
from xpdist.driver import hydra_private


def test_the_split_is_the_basic_sweepers_cross_product_in_order():
    parsed = OverridesParser.create().parse_overrides(["strategy=one_device,mirrored", "seed=1,2", "trainer.epochs=3"])
    assert hydra_private.split_like_basic_sweeper(parsed) == [
        ["strategy=one_device", "seed=1", "trainer.epochs=3"], ["strategy=one_device", "seed=2", "trainer.epochs=3"],
        ["strategy=mirrored", "seed=1", "trainer.epochs=3"], ["strategy=mirrored", "seed=2", "trainer.epochs=3"]]


def test_the_default_sweeper_is_the_basic_one():
    assert compose(["seed=1"]).hydra.sweeper._target_ == hydra_private.BASIC_SWEEPER


def test_a_failed_jobs_exception_is_read_without_a_line_on_stderr(capsys):
    error = ValueError("boom")
    failed, done = JobReturn(), JobReturn()
    failed.status, failed.return_value = JobStatus.FAILED, error
    done.status, done.return_value = JobStatus.COMPLETED, 42
    assert hydra_private.job_error(failed) is error and hydra_private.job_result(failed) is None
    assert hydra_private.job_error(done) is None and hydra_private.job_result(done) == 42
    assert capsys.readouterr().err == ""
