"""The hand-written script xpdist is benchmarked against.

It is what a careful user writes from the tf.distribute guide's Model.fit example: create
the strategy, build and compile the model under strategy.scope(), batch a tf.data pipeline
by the global batch size, call model.fit, and (unless --no-mlflow) log params and each
epoch's metrics with mlflow.start_run / log_params / log_metrics. Nothing is tuned: no
steps_per_execution, no prefetch, no XLA.

Its model, data, optimizer, seed and batch sizes match xpdist's defaults for the same
settings, so scripts/bench.py compares like with like. It prints one line
`BENCH_RESULT {json}` with the timing bench.py reads (same definitions as xpdist's):
  first_step_at           unix time at which the first training step had finished
  last_epoch_end_at       unix time at which the last epoch had ended
  steady_examples_per_sec median over epochs 2.. of examples / training seconds

    python scripts/bench_baseline.py --strategy mirrored --cross-ops hierarchical \
        --logical-cpus 2 --model cnn --dataset synthetic_images --epochs 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

STRATEGIES = ("default", "one_device", "mirrored", "central_storage", "multi_worker_mirrored", "parameter_server")
CROSS_OPS = ("auto", "hierarchical", "reduction_to_one_device")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", choices=STRATEGIES, default="one_device")
    p.add_argument("--cross-ops", choices=CROSS_OPS, default="auto", help="mirrored only")
    p.add_argument("--logical-cpus", type=int, default=1, help="split the CPU into this many devices")
    p.add_argument("--model", choices=("linear", "cnn"), default="linear")
    p.add_argument("--dataset", choices=("synthetic_regression", "synthetic_images", "tfrecord"),
                   default="synthetic_regression")
    p.add_argument("--files", default=None, help="tfrecord: glob of TFRecord files with image (float32 HxWx3) and "
                   "label (int64) features")
    p.add_argument("--num-examples", type=int, default=None, help="default: 100 (regression), 2048 (images)")
    p.add_argument("--image-size", type=int, default=32, help="synthetic_images: height and width")
    p.add_argument("--filters", type=int, nargs=2, default=(32, 64), help="cnn: filters of the two Conv2D blocks")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--per-replica-batch", type=int, default=None, help="default: 5 (regression), 64 (images)")
    p.add_argument("--learning-rate", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--no-mlflow", action="store_true", help="train without any MLflow logging")
    p.add_argument("--tracking-uri", default=None, help="default: MLFLOW_TRACKING_URI, else ./mlflow.db")
    p.add_argument("--experiment", default="baseline")
    p.add_argument("--log-model", action="store_true",
                   help="also log the trained model in MLflow's format (mlflow.keras.log_model; "
                   "mlflow.tensorflow.log_model under tf-keras); not under --no-mlflow")
    args = p.parse_args(argv)
    images = args.dataset == "synthetic_images"
    args.num_examples = args.num_examples or (2048 if images else 100)
    args.per_replica_batch = args.per_replica_batch or (64 if images else 5)
    return args


def make_strategy(tf, args):
    if args.strategy == "parameter_server":  # the chief coordinates; TF_CONFIG names the cluster
        return tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
    if args.strategy == "multi_worker_mirrored":  # first, before any other TF op (TF_CONFIG names the cluster)
        return tf.distribute.MultiWorkerMirroredStrategy()
    if args.logical_cpus > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.logical_cpus)
    devices = [f"/cpu:{i}" for i in range(args.logical_cpus)]
    if args.strategy == "one_device":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    if args.strategy == "mirrored":
        ops = {"auto": None, "hierarchical": tf.distribute.HierarchicalCopyAllReduce(),
               "reduction_to_one_device": tf.distribute.ReductionToOneDevice()}[args.cross_ops]
        return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=ops)
    if args.strategy == "central_storage":
        return tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices)
    return tf.distribute.get_strategy()


def make_data(tf, args, global_batch: int):
    import numpy as np

    rng = np.random.default_rng(args.seed)
    if args.dataset == "tfrecord":  # the tf.data guide's pipeline: interleaved files, parse, batch, prefetch
        spec = {"image": tf.io.FixedLenFeature([args.image_size, args.image_size, 3], tf.float32),
                "label": tf.io.FixedLenFeature([], tf.int64)}
        files = tf.data.Dataset.list_files(args.files, shuffle=True, seed=args.seed)
        records = files.interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
        parsed = records.map(lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
        dataset = parsed.map(lambda e: (e["image"], e["label"])).batch(global_batch, drop_remainder=True)
        return dataset.prefetch(tf.data.AUTOTUNE), (args.image_size, args.image_size, 3), 10
    if args.dataset == "synthetic_regression":  # the guide's ones-to-ones data
        dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(args.num_examples)
        return dataset.batch(global_batch), (1,), 1
    x = rng.random((args.num_examples, args.image_size, args.image_size, 3), dtype=np.float32)
    y = rng.integers(0, 10, size=args.num_examples).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=args.seed)
    return dataset.batch(global_batch), x.shape[1:], 10


def make_model(keras, args, input_shape, outputs):
    l2 = keras.regularizers.L2(1e-4)
    if args.model == "linear":
        layers = [keras.Input(shape=input_shape), keras.layers.Dense(outputs, kernel_regularizer=l2)]
    else:
        layers = [keras.Input(shape=input_shape),
                  keras.layers.Conv2D(args.filters[0], 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(),
                  keras.layers.Conv2D(args.filters[1], 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(),
                  keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(outputs, kernel_regularizer=l2)]
    model = keras.Sequential(layers)
    if args.dataset == "synthetic_regression":
        loss, metrics = "mse", ["mae"]
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=args.learning_rate), loss=loss, metrics=metrics)
    return model


def is_chief() -> bool:
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    return task.get("type", "worker") in ("worker", "chief") and task.get("index", 0) == 0


def serve(tf) -> None:
    """A parameter_server worker or ps task, as the guide has it: a server that runs what the
    chief sends it, until it is killed (bench.py stops it once the chief has ended)."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
                         protocol="grpc", start=True).join()


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.strategy in ("multi_worker_mirrored", "parameter_server"):
        # Keras 3's Model.fit fails under MWMS (keras#20585) and refuses ParameterServerStrategy (keras#18624).
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    if args.strategy == "parameter_server":
        os.environ["GRPC_FAIL_FAST"] = "use_caller"  # the guide's setting, in every task
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    if args.strategy == "parameter_server" and not json.loads(os.environ["TF_CONFIG"])["task"]["type"] == "chief":
        serve(tf)
        return 0

    strategy = make_strategy(tf, args)
    tf.keras.utils.set_random_seed(args.seed)
    global_batch = args.per_replica_batch * strategy.num_replicas_in_sync
    dataset, input_shape, outputs = make_data(tf, args, global_batch)
    batches = dataset  # parameter_server's Model.fit takes a DatasetCreator instead (below)
    with strategy.scope():
        model = make_model(tf.keras, args, input_shape, outputs)
    steps = args.num_examples // global_batch
    chief = is_chief()
    log = not args.no_mlflow and chief
    if log:
        import mlflow

        if args.tracking_uri:
            mlflow.set_tracking_uri(args.tracking_uri)
        mlflow.set_experiment(args.experiment)
        mlflow.start_run()
        mlflow.log_params({**vars(args), "num_replicas": strategy.num_replicas_in_sync,
                           "global_batch_size": global_batch})
    timing = {"first_step_at": None, "rates": []}

    class Timing(tf.keras.callbacks.Callback):
        async_safe = True  # its batch hook must not make Keras 3 wait for every step

        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if timing["first_step_at"] is None:
                timing["first_step_at"] = time.time()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - self.start
            rate = steps * global_batch / seconds
            timing["rates"].append(rate)
            timing["last_epoch_end_at"] = time.time()
            if log:
                mlflow.log_metrics({**{k: float(v) for k, v in (logs or {}).items()},
                                    "epoch_time_s": seconds, "examples_per_sec": rate}, step=epoch + 1)

    fit_args = dict(epochs=args.epochs, callbacks=[Timing()], verbose=2 if chief else 0)
    if args.strategy == "parameter_server":
        # The guide's Model.fit under ParameterServerStrategy: each worker builds its own pipeline,
        # and no batch-level callback is allowed (so no first step time: bench.py reports none).
        del Timing.on_train_batch_end
        dataset = tf.keras.utils.experimental.DatasetCreator(
            lambda _context: make_data(tf, args, global_batch)[0].repeat())
        fit_args["steps_per_epoch"] = steps
    history = model.fit(dataset, **fit_args)
    if args.log_model and not args.no_mlflow:
        log_model(tf, args, model, batches, log)
    if log:
        mlflow.end_run()
    rates = sorted(timing["rates"][1:]) or timing["rates"]
    result = {"first_step_at": timing["first_step_at"], "last_epoch_end_at": timing.get("last_epoch_end_at"),
              "steady_examples_per_sec": rates[len(rates) // 2],
              "examples_per_sec": timing["rates"], "loss": float(history.history["loss"][-1]),
              "num_replicas": strategy.num_replicas_in_sync, "global_batch_size": global_batch}
    if chief:
        print("BENCH_RESULT " + json.dumps(result), flush=True)
    return 0


def log_model(tf, args, model, batches, chief_logs: bool) -> None:
    """The trained model in MLflow's format, as a user logs it: mlflow.keras.log_model (under
    tf-keras mlflow.tensorflow.log_model) with a signature inferred from an example's
    predictions and the requirements named, as xpdist names them (inferred, they cost a
    process that imports TensorFlow again). No input example: mlflow.keras.log_model fails
    with one, writing it before it makes the model's folder (mlflow/mlflow#16183; xpdist
    makes the folder first, a script would not). Under multi_worker_mirrored saving reads
    variables through collectives, so the other workers save too, into a folder they delete
    (the guide's "Model saving and loading"). `batches`: the training data, whose first batch
    gives the example."""
    if not chief_logs:
        if args.strategy == "multi_worker_mirrored":
            import shutil
            import tempfile

            scratch = tempfile.mkdtemp()
            model.save(os.path.join(scratch, "model.keras"))
            shutil.rmtree(scratch, ignore_errors=True)
        return
    import mlflow
    from mlflow.models import infer_signature

    inputs = next(iter(batches))[0]
    example = inputs[:5].numpy().astype("float32")
    signature = infer_signature(example, model(example, training=False).numpy())
    requirements = [f"tensorflow=={tf.__version__}", f"mlflow=={mlflow.__version__}"]
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":  # tf-keras: MLflow's tensorflow flavour
        import mlflow.tensorflow
        import tf_keras

        mlflow.tensorflow.log_model(model, name="model", signature=signature,
                                    pip_requirements=requirements + [f"tf-keras=={tf_keras.__version__}"])
    else:
        import mlflow.keras

        mlflow.keras.log_model(model, name="model", signature=signature,
                               pip_requirements=requirements + [f"keras=={tf.keras.__version__}"])


if __name__ == "__main__":
    sys.exit(main())
