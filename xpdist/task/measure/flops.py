"""FLOPs of one training example, achieved FLOP/s and model FLOPs utilisation (mfu).

flops_per_example is counted, not estimated: TensorFlow's graph profiler
(tf.compat.v1.profiler, the float_operation view) sums the registered FLOP statistics of every
op in the graph of one training step at batch 1 (forward, loss and the gradients of every
trainable variable; the optimizer's update is not counted). The ops with a registered count
are the ones that matter (Conv2D, MatMul, BatchMatMul and their gradients, pooling, BiasAdd);
element-wise activations such as ReLU count 0. Einsum, which has no registered count, is
counted here from its equation and shapes (einsum_flops). The graph is the traced one, before
Grappler prunes it: a first Conv2D layer's gradient with respect to the images is in it and
counted (the tape leaves out a first Dense layer's), though the runtime does not compute it.
For the guide's cnn on 32x32x3 images this is 3 x the forward count within 1%
(tests/integration/test_real_models.py checks it against a hand count); for an mlp it is
about 2.5 x (measured: 44,952 for 64 -> 64 -> 64 -> 10, whose forward pass is 17,664).

Counting runs after training, so it costs the first step nothing; it traces the model once
more (measured on this 2-core CPU: 0.07 s for the cnn, 5.2 s for ResNet50), between the last
epoch and the run's end. So a count is kept on disk (cache_dir()) and read back by the next run
of the same step: the model's architecture (its Keras config: layers, shapes, dtypes), its
inputs' shapes, the loss's config, the kind of labels, and the TensorFlow and Keras versions
that traced it. Only a step built entirely of Keras's own classes is kept: the code of a
user's layer, model or loss can change where its config does not, and its count is taken
again in every run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

# Where counts are kept between runs: this variable, else $XDG_CACHE_HOME/xpdist/flops, else
# ~/.cache/xpdist/flops. Deleting the folder only costs the next runs a count each.
CACHE_ENV = "XPDIST_FLOPS_CACHE"
# Part of every kept count's key: raise it when what count_flops_per_example counts changes.
COUNT_VERSION = 1

# Dense peak FLOP/s of one device, by a name fragment of the GPU TensorFlow reports
# (tf.config.experimental.get_device_details(gpu)["device_name"]), from NVIDIA's data sheets:
# (float32 training, where TensorFlow uses TF32 tensor cores on Ampere and later; 16-bit
# mixed precision). The first fragment found in the name wins, so longer names come first.
PEAK_FLOPS: Tuple[Tuple[str, float, float], ...] = (
    ("H100", 494.7e12, 989.4e12),
    ("A100", 156e12, 312e12),
    ("A10G", 31.2e12, 125e12),  # AWS's A10G: float32 not on tensor cores at the listed rate
    ("A10", 62.5e12, 125e12),
    ("L4", 60e12, 121e12),
    ("V100", 15.7e12, 125e12),
    ("T4", 8.1e12, 65e12),
)


def count_flops_per_example(tf, model, loss_fn, kind: str) -> int:
    """FLOPs of one example's training step (forward, loss, gradients), counted by TF's profiler.

    The step is traced at batch 1 in a graph of its own, with the model's own variables; it is
    never run.
    """
    spec = [tf.TensorSpec([1, *inp.shape[1:]], inp.dtype) for inp in model.inputs]

    def step(*x):
        with tf.GradientTape() as tape:
            outputs = model(x[0] if len(x) == 1 else list(x), training=True)
            labels = tf.zeros([1], tf.int32) if kind == "classification" else tf.zeros_like(outputs)
            loss = loss_fn(labels, outputs)
        return tape.gradient(loss, model.trainable_variables)

    graph = tf.function(step).get_concrete_function(*spec).graph
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")  # the compat.v1 API logs a deprecation notice on every call
    try:
        counted = tf.compat.v1.profiler.profile(graph, options=options, cmd="op").total_float_ops
    finally:
        logger.setLevel(level)
    return int(counted) + sum(einsum_flops(op) for op in graph.get_operations() if op.type == "Einsum")


def einsum_flops(op) -> int:
    """2 x the product of every index's size: one multiply and one add per term of the sum.

    TensorFlow registers no FLOP statistics for Einsum (Keras's MultiHeadAttention and
    EinsumDense compute with it), so the profiler counts it 0; this adds it.
    """
    equation = op.get_attr("equation").decode()
    sizes: Dict[str, int] = {}
    for term, tensor in zip(equation.split("->")[0].split(","), op.inputs):
        if "..." in term or tensor.shape.rank != len(term):
            return 0  # not at batch 1 with static shapes: not counted
        for letter, size in zip(term, tensor.shape):
            sizes[letter] = int(size)
    total = 2
    for size in sizes.values():
        total *= size
    return total


def peak_flops(tf, cfg, devices: int) -> Optional[Tuple[float, str]]:
    """(peak FLOP/s of the devices the run trains on, where the figure comes from), or None (CPU).

    devices.peak_flops wins; else the table above, times the number of GPUs that train.
    """
    if cfg.devices.peak_flops is not None:
        return float(cfg.devices.peak_flops), "devices.peak_flops"
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "")
    half = str(cfg.trainer.precision) != "float32"
    for fragment, full, reduced in PEAK_FLOPS:
        if fragment in name:
            return (reduced if half else full) * devices, f"{fragment} x {devices}"
    return None


def peak_memory(tf) -> Dict[str, float]:
    """peak_memory_mb: the task process's peak resident memory (getrusage's ru_maxrss, KiB on
    Linux), TensorFlow's runtime included; on a GPU also peak_gpu_memory_mb, TensorFlow's
    allocator peak on the first GPU."""
    import resource

    out = {"peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if tf.config.list_physical_devices("GPU"):
        out["peak_gpu_memory_mb"] = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    return out


def cache_dir() -> Path:
    """The folder of the counts kept between runs (CACHE_ENV)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xpdist" / "flops"


def _keras_own(obj) -> bool:
    return type(obj).__module__.split(".")[0] in ("keras", "tf_keras")


def _all_keras_own(layer) -> bool:
    """Whether the layer, and every layer inside it, is one of Keras's own classes."""
    return _keras_own(layer) and all(_all_keras_own(inner) for inner in getattr(layer, "layers", ()))


def cache_key(tf, model, loss_fn, kind: str) -> Optional[str]:
    """The key of this training step's count, or None where it must be counted every run: a
    layer, model or loss of the user's (see the module's docstring) or a config Keras cannot
    write out."""
    if not (_all_keras_own(model) and _keras_own(loss_fn)):
        return None
    package = sys.modules[type(model).__module__.split(".")[0]]  # keras, or tf_keras (tf.keras has no version)
    try:
        # get_config, not to_json: the architecture without the compile config, whose optimizer
        # (its learning rate follows the replicas) the counted step does not include.
        # The inputs' shapes too: the count depends on them, whether or not a config records them.
        described = {"model": [type(model).__name__, model.get_config()],
                     "inputs": [[list(inp.shape), str(inp.dtype)] for inp in model.inputs],
                     "loss": [type(loss_fn).__name__, loss_fn.get_config()],
                     "kind": kind, "tensorflow": tf.__version__, package.__name__: package.__version__,
                     "count": COUNT_VERSION}
        text = json.dumps(described, sort_keys=True)
    except Exception:  # noqa: BLE001 - a config Keras cannot write out: counted, not kept
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def _kept(key: str) -> Optional[int]:
    try:
        return int(json.loads((cache_dir() / f"{key}.json").read_text())["flops_per_example"])
    except (OSError, ValueError, KeyError, TypeError):  # none kept, or a file cut short: count again
        return None


def _keep(key: str, flops: int) -> None:
    """Writes the count where the next run finds it, whole or not at all (a rename); a folder
    that cannot be written only means counting again next time."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, scratch = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"flops_per_example": flops}, f)
        os.replace(scratch, folder / f"{key}.json")
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(scratch)


def figures(ctx, final: Dict[str, float], build_loss: Callable[[], Any]) -> Dict[str, float]:
    """The summary figures beyond the trainer's: peak memory, flops_per_example,
    achieved_flops_per_sec and (peak FLOP/s known) mfu.

    Peak memory is read first, before counting traces anything. A model whose graph the
    profiler cannot read gets no FLOP figures, and a line on stderr says why.

    Args:
        build_loss: builds the run's loss (its FLOPs count too); called inside the count, so
            that a loss the profiler cannot trace leaves the figures out like any other failure.
    """
    memory = peak_memory(ctx.tf)
    started = time.perf_counter()
    try:
        loss_fn = build_loss()
        key = cache_key(ctx.tf, ctx.model, loss_fn, ctx.arrays.kind)
        flops = _kept(key) if key else None
        if flops is None:
            flops = count_flops_per_example(ctx.tf, ctx.model, loss_fn, ctx.arrays.kind)
            if key:
                _keep(key, flops)
    except Exception as err:  # noqa: BLE001 - a figure we cannot count is left out, not guessed
        print(f"xpdist: flops_per_example not counted ({type(err).__name__}: {err})", file=sys.stderr, flush=True)
        return memory
    out = {**memory, "flops_per_example": float(flops), "flops_count_s": time.perf_counter() - started}
    rate = final.get("steady_examples_per_sec")
    if rate:
        out["achieved_flops_per_sec"] = flops * rate
        devices = ctx.plan.num_replicas if ctx.tf.config.list_physical_devices("GPU") else 1
        peak = peak_flops(ctx.tf, ctx.cfg, devices)
        if peak is not None:
            out["mfu"] = out["achieved_flops_per_sec"] / peak[0]
    return out
