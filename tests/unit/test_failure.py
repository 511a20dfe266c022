"""A failed task's one line: the cause, not the header above it, and where the traceback is."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpdist.task.failure import MAX_CAUSE, one_line, root_cause

# The shape of TensorFlow's InvalidArgumentError message from Model.fit (abridged frames).
GRAPH_ERROR = """Graph execution error:

Detected at node sequential_1/bad_1/Reshape defined at (most recent call last):
  File "/x/train.py", line 5, in <module>

  File "/site-packages/keras/src/backend/tensorflow/trainer.py", line 399, in fit

  File "/x/model.py", line 7, in call

Input to reshape is a tensor with 80 values, but the requested shape has 84
\t [[{{node sequential_1/bad_1/Reshape}}]] [Op:__inference_multi_step_on_iterator_225]"""
# Keras 3 wraps a layer's error and sets the cause in bold for terminals.
KERAS_LAYER_ERROR = """Exception encountered when calling Bad.call().

\x1b[1mCannot reshape a tensor with 5 elements to shape [5,7] (35 elements)\x1b[0m

Arguments received by Bad.call():
  \u2022 x=tf.Tensor(shape=(5, 1), dtype=float32)"""
MANY_ERRORS = """2 root error(s) found.
  (0) INVALID_ARGUMENT:  Incompatible shapes: [8,3] vs. [8]
\t [[{{node add}}]]
  (1) CANCELLED:  Function was cancelled before it was started
0 successful operations."""


@pytest.mark.parametrize("message, cause", [
    (GRAPH_ERROR, "Input to reshape is a tensor with 80 values, but the requested shape has 84"),
    (KERAS_LAYER_ERROR, "Cannot reshape a tensor with 5 elements to shape [5,7] (35 elements)"),
    (MANY_ERRORS, "INVALID_ARGUMENT:  Incompatible shapes: [8,3] vs. [8]"),
    ("dataset=mnist could not be downloaded\nmore", "dataset=mnist could not be downloaded"),
    ("", ""),
], ids=["tf-graph-error", "keras-layer-error", "several-root-errors", "plain", "empty"])
def test_root_cause_is_the_line_that_says_what_went_wrong(message, cause):
    assert root_cause(RuntimeError(message)) == cause


def test_one_line_names_the_type_the_cause_and_the_traceback_file():
    line = one_line(ValueError(GRAPH_ERROR), Path("/runs/job/task_error.txt"))
    assert line == ("ValueError: Input to reshape is a tensor with 80 values, but the requested shape has 84 "
                    "(traceback: /runs/job/task_error.txt)")
    assert one_line(KeyError(), Path("/t.txt")) == "KeyError (traceback: /t.txt)"


def test_a_long_cause_is_cut():
    cause = root_cause(ValueError("x" * 5000))
    assert len(cause) == MAX_CAUSE and cause.endswith("…")


# A 2-worker MultiWorkerMirroredStrategy whose peer's link was cut, where the collective's own
# connection timed out before TensorFlow's health check named the task (seen under load).
LINK_TIMED_OUT = ("{{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/replica:0/"
                  "task:0/device:CPU:0}} Collective ops is aborted by: recvmsg:Connection timed out "
                  "[Op:CollectiveReduceV2]")


def test_a_collective_that_lost_its_link_names_its_only_peer():
    assert root_cause(RuntimeError(LINK_TIMED_OUT), ["worker:1"]) == (
        "task worker:1 unreachable (recvmsg:Connection timed out); collective ops aborted")
    # with more than one peer (or none known) the message cannot say which
    assert root_cause(RuntimeError(LINK_TIMED_OUT), ["worker:1", "worker:2"]) == (
        "a peer task unreachable (recvmsg:Connection timed out); collective ops aborted")


def test_a_tasks_peers_are_the_other_computing_tasks_of_tf_config():
    import json

    from xpdist.core.clusterenv import ClusterEnv

    config = {"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]}, "task": {"type": "worker", "index": 0}}
    env = ClusterEnv.from_environ("tf_config", {"TF_CONFIG": json.dumps(config)})
    assert env.peers == ["chief:0", "worker:1"]
    assert ClusterEnv.from_environ("localhost", {}).peers == []
