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
more (measured on this 2-core CPU: 0.07 s for the cnn, 5.2 s for ResNet50).
"""

from __future__ import annotations

import sys
import time
from typing import Dict, Optional, Tuple

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


def figures(ctx, final: Dict[str, float]) -> Dict[str, float]:
    """The summary figures beyond the trainer's: peak memory, flops_per_example,
    achieved_flops_per_sec and (peak FLOP/s known) mfu.

    Peak memory is read first, before counting traces anything. A model whose graph the
    profiler cannot read gets no FLOP figures, and a line on stderr says why.
    """
    from xpdist.task import losses

    memory = peak_memory(ctx.tf)
    started = time.perf_counter()
    try:
        flops = count_flops_per_example(ctx.tf, ctx.model, losses.build_loss(ctx.keras, ctx.cfg, ctx.arrays.kind),
                                        ctx.arrays.kind)
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
