"""Where a training step's time goes: TensorFlow's profiler trace of a few steps, read back
into a per-step breakdown of input wait, collective communication and compute.

The trace is TensorFlow's own (`tf.profiler.experimental.start/stop`): a `plugins/profile/<run>/
<host>.xplane.pb` under the log directory, which TensorBoard's profile plugin opens. It is read
here with the XSpace protocol buffer TensorFlow writes it with: TensorFlow 2.21 has no public
reader of its own trace format (TensorBoard's profile plugin and xprof convert it, and neither
is a dependency of xpdist), so `tensorflow.tsl.profiler.protobuf.xplane_pb2` is imported, the
module TensorFlow's profiler itself uses.

A step is one call of the trainer's step function, as the host thread records it:
`multi_step_on_iterator` or `one_step_on_iterator` (Keras 3 Model.fit), `train_function`
(tf-keras Model.fit), `_train_steps` (trainer=ctl); with steps_per_execution above 1 a call
runs several steps. Within a call:
- input wait: the time the step was blocked in `IteratorGetNextOp` (tf.data had no batch ready);
- communication: collective and send/receive ops (all-reduce, NCCL, parameter-server transfers);
- compute: the rest of the call.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple

STEP_FUNCTIONS = ("multi_step_on_iterator", "one_step_on_iterator", "train_function", "_train_steps")
_INPUT = re.compile(r"^IteratorGetNext(Op|AsOptional)?(::DoCompute)?$")
_COMMUNICATION = re.compile(r"AllReduce|Collective|Nccl|RecvTensor|_Send|_Recv|:Send|:Recv|RemoteCall", re.I)

Interval = Tuple[int, int]  # picoseconds from the trace's zero


def fit_callback(tf, keras, first: int, last: int, logdir: Path, steps_per_epoch: int,
                 steps_per_execution: int = 1):
    """A Keras callback that traces training steps first..last, counted from 0 over the whole
    run as trainer=ctl counts them (epoch e's step b is e * steps_per_epoch + b), whatever
    steps_per_execution is. Both Keras flavours pass a call's first step in its epoch to
    on_train_batch_begin and its last to on_train_batch_end, and have LambdaCallback."""
    window = StepWindow(tf, first, last, logdir)
    epoch = {"at": 0}  # the first step of the current epoch

    def epoch_begin(number, logs=None):
        epoch["at"] = number * steps_per_epoch

    def begin(batch, logs=None):
        window.before(epoch["at"] + batch, steps_per_execution)

    def end(batch, logs=None):
        # Keras 3 counts a last call of an epoch that steps_per_execution does not divide as if
        # it were whole: its end is the epoch's last step.
        window.after(epoch["at"] + min(batch, steps_per_epoch - 1), 1)

    def train_end(logs=None):  # training ended inside the window: the trace is still written
        window.close()

    return keras.callbacks.LambdaCallback(on_epoch_begin=epoch_begin, on_train_batch_begin=begin,
                                          on_train_batch_end=end, on_train_end=train_end)


class StepWindow:
    """The trace of steps first..last, for a loop that runs `count` steps per call (trainer=ctl's
    loop, and Model.fit's through fit_callback).

    Call around each call of the step function: `before(step, count)` starts the profiler
    when the call reaches `first`, `after(step, count)` stops it once the call ran `last`;
    `close()` stops a trace that training ended inside.
    """

    def __init__(self, tf, first: int, last: int, logdir: Path):
        self.tf, self.first, self.last, self.logdir = tf, first, last, logdir
        self.on = self.done = False

    def before(self, step: int, count: int) -> None:
        if not self.on and not self.done and step <= self.last and step + count > self.first:
            self.tf.profiler.experimental.start(str(self.logdir))
            self.on = True

    def after(self, step: int, count: int) -> None:
        if self.on and step + count - 1 >= self.last:
            self.close()

    def close(self) -> None:
        if self.on:
            self.tf.profiler.experimental.stop()
            self.on, self.done = False, True


def window(ctx):
    """(first, last, this task's trace directory) of trainer.profile_steps, or None."""
    steps = list(ctx.cfg.trainer.profile_steps)
    if not steps:
        return None
    return steps[0], steps[1], ctx.job.profile / ctx.cluster.file_name


def traced_epochs(cfg, steps_per_epoch: int) -> Set[int]:
    """The epochs (numbered from 1) that trainer.profile_steps reaches into: their rate is not
    the run's steady one (the trace's own cost, and some runs train faster once traced), so
    steady examples/sec leaves them out."""
    steps = list(cfg.trainer.profile_steps)
    if not steps or steps_per_epoch < 1:
        return set()
    return set(range(steps[0] // steps_per_epoch + 1, steps[1] // steps_per_epoch + 2))


def summary(ctx) -> Dict[str, float]:
    """The chief's split of its traced steps' time (fractions()), {} without a trace."""
    found = window(ctx)
    traces = trace_files(found[2]) if found else []
    return fractions(breakdown(traces[-1])) if traces else {}


def trace_files(logdir: Path) -> List[Path]:
    return sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"))


def breakdown(path: Path) -> List[Dict[str, float]]:
    """One dict per traced step call: step_ms, input_ms, communication_ms, compute_ms."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # see the module docstring

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    steps: List[Interval] = []
    inputs: List[Interval] = []
    comms: List[Interval] = []
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            zero = line.timestamp_ns * 1000
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                span = (zero + event.offset_ps, zero + event.offset_ps + event.duration_ps)
                if name in STEP_FUNCTIONS:
                    steps.append(span)
                elif _INPUT.match(name):
                    inputs.append(span)
                elif _COMMUNICATION.search(name):
                    comms.append(span)
    out = []
    for start, end in _outermost(steps):
        waited = _covered(inputs, start, end)
        talked = max(0, _covered(comms, start, end) - _covered(_intersect(comms, inputs), start, end))
        step = end - start
        out.append({"step_ms": step / 1e9, "input_ms": waited / 1e9, "communication_ms": talked / 1e9,
                    "compute_ms": max(0, step - waited - talked) / 1e9})
    return out


def fractions(steps: Sequence[Dict[str, float]]) -> Dict[str, float]:
    """The share of the traced steps' time each part took (input_wait_fraction, ...), and the
    median step in ms."""
    total = sum(s["step_ms"] for s in steps)
    if not steps or total <= 0:
        return {}
    ordered = sorted(s["step_ms"] for s in steps)
    return {"input_wait_fraction": sum(s["input_ms"] for s in steps) / total,
            "communication_fraction": sum(s["communication_ms"] for s in steps) / total,
            "compute_fraction": sum(s["compute_ms"] for s in steps) / total,
            "profiled_step_ms": ordered[len(ordered) // 2]}


def _outermost(spans: List[Interval]) -> List[Interval]:
    """Spans not inside another (a step function's own nested events of the same name)."""
    out: List[Interval] = []
    for span in sorted(spans, key=lambda s: (s[0], -s[1])):
        if out and span[1] <= out[-1][1]:
            continue
        out.append(span)
    return out


def _merge(spans: List[Interval]) -> List[Interval]:
    merged: List[Interval] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _covered(spans: List[Interval], start: int, end: int) -> int:
    """Picoseconds of [start, end] that the union of spans covers."""
    return sum(max(0, min(e, end) - max(s, start)) for s, e in _merge(spans))


def _intersect(a: List[Interval], b: List[Interval]) -> List[Interval]:
    out = []
    for s1, e1 in _merge(a):
        for s2, e2 in _merge(b):
            if min(e1, e2) > max(s1, s2):
                out.append((max(s1, s2), min(e1, e2)))
    return out
