"""The config schema: one dataclass per Hydra config group.

The YAML files under conf/ carry values only; these dataclasses give every key its type and
default, so a misspelled key or a wrong type fails when Hydra composes the config. This module
imports no TensorFlow: the process that composes configs never needs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore


class LrScaling(Enum):
    # The learning rate as configured, whatever the global batch.
    none = 0
    # learning_rate x global_batch / reference_batch_size.
    linear = 1
    # learning_rate x sqrt(global_batch / reference_batch_size).
    sqrt = 2
    # Looked up in optimizer.lr_table by global batch size (the guide's LEARNING_RATES_BY_BATCH_SIZE).
    table = 3


class KerasFlavour(Enum):
    # tf-keras exactly where Keras 3 cannot train (Model.fit under multi-worker or PS), else Keras 3.
    auto = 0
    keras3 = 1
    legacy = 2


class Partitioner(Enum):
    # Variables are not sharded across parameter servers.
    none = 0
    # tf.distribute.experimental.partitioners.MinSizePartitioner.
    min_size = 1
    # tf.distribute.experimental.partitioners.FixedShardsPartitioner.
    fixed = 2


@dataclass
class StrategyConfig:
    # Which tf.distribute strategy: default, one_device, mirrored, central_storage,
    # multi_worker_mirrored, parameter_server, tpu. Set by the option file.
    name: str = "default"
    # Devices to use, e.g. ["/cpu:0", "/cpu:1"]. Empty: every visible GPU, else every
    # (logical) CPU. one_device takes the first entry.
    devices: List[str] = field(default_factory=list)
    # strategy=tpu: the TPU name or grpc:// address handed to TPUClusterResolver;
    # "local" for a TPU VM's own chips.
    tpu: str = ""
    # strategy=parameter_server: how variables are sharded over parameter servers.
    variable_partitioner: Partitioner = Partitioner.none
    # variable_partitioner=min_size: smallest shard, in bytes (default 256 KiB).
    min_shard_bytes: int = 256 << 10
    # variable_partitioner=min_size: at most this many shards (default: one per ps).
    max_shards: Optional[int] = None
    # variable_partitioner=fixed: exactly this many shards (default: one per ps).
    num_shards: Optional[int] = None


@dataclass
class CrossOpsConfig:
    # MirroredStrategy's cross_device_ops: auto, nccl, hierarchical, reduction_to_one_device.
    name: str = "auto"
    # nccl and hierarchical: gradients are packed into this many tensors before all-reduce.
    num_packs: int = 1
    # reduction_to_one_device: the device that reduces ("" lets TensorFlow choose).
    reduce_to_device: str = ""


@dataclass
class CommunicationConfig:
    # MultiWorkerMirroredStrategy's collective implementation: auto, ring, nccl.
    name: str = "auto"
    # Give up on a collective after this many seconds (null: wait forever).
    timeout_seconds: Optional[float] = None


@dataclass
class ClusterConfig:
    # Where the task processes run: local (one process), localhost (a real multi-process
    # cluster on 127.0.0.1), tf_config (this process is the task TF_CONFIG names),
    # slurm (SlurmClusterResolver).
    name: str = "local"
    # cluster=localhost: number of worker processes.
    workers: int = 1
    # cluster=localhost with strategy=parameter_server: number of parameter servers.
    ps: int = 0
    # cluster=localhost: restart the whole cluster this many times after a task is killed
    # by a signal, is lost, or fails with a network-type error (UnavailableError,
    # DeadlineExceeded, a connection reset); never after an exception in user code or
    # config. Training resumes from the last completed epoch.
    max_restarts: int = 0
    # Seconds to wait for every task to start before giving up.
    start_timeout_s: float = 120.0


@dataclass
class ModelConfig:
    # linear, mlp, cnn or custom. Set by the option file.
    name: str = "linear"
    # model=custom: dotted path of a callable returning a Keras model; it is called with
    # input_shape, num_outputs and the entries of `kwargs`.
    _target_: str = ""
    # model=custom: extra keyword arguments for the callable.
    kwargs: Dict[str, Any] = field(default_factory=dict)
    # mlp: sizes of the hidden Dense layers.
    hidden_units: List[int] = field(default_factory=lambda: [64, 64])
    # cnn: filters of each Conv2D block.
    filters: List[int] = field(default_factory=lambda: [32, 64])
    # L2 factor on Dense kernels (the guide's linear model uses 1e-4).
    l2: float = 1e-4
    # mlp and cnn: dropout rate before the output layer (0 disables it).
    dropout: float = 0.0


@dataclass
class DatasetConfig:
    # synthetic_regression, synthetic_images, digits, npz, mnist. Set by the option file.
    name: str = "synthetic_regression"
    # Examples in each replica's batch; the global batch is this x the number of replicas.
    per_replica_batch_size: int = 5
    # Fraction of the examples held out for validation (0 disables validation).
    validation_split: float = 0.0
    # Synthetic data sets: number of examples.
    num_examples: int = 100
    # synthetic_regression: features per example (the guide's example has 1).
    num_features: int = 1
    # synthetic_regression: Gaussian noise on the targets (0: the guide's ones-to-ones data).
    noise: float = 0.0
    # synthetic_images: image shape, height x width x channels.
    image_shape: List[int] = field(default_factory=lambda: [32, 32, 3])
    # synthetic_images: number of classes.
    num_classes: int = 10
    # npz: path of a .npz file holding arrays `x` and `y` (relative to the launch directory).
    path: str = ""
    # Shuffle buffer in examples. 0 (default): each pass is an exact seeded permutation of the
    # whole training set, identical whatever the strategy or trainer; N > 0: tf.data's
    # shuffle with an N-example buffer (less memory, order depends on TensorFlow's seeding).
    shuffle_buffer: int = 0


@dataclass
class OptimizerConfig:
    # sgd or adam. Set by the option file.
    name: str = "sgd"
    # Base learning rate, before optimizer.lr_scaling.
    learning_rate: float = 0.01
    # How the learning rate follows the global batch: none, linear, sqrt, table.
    lr_scaling: LrScaling = LrScaling.none
    # lr_scaling=linear/sqrt: the batch size learning_rate was tuned for (null: the
    # per-replica batch size, so the rate scales with the number of replicas).
    reference_batch_size: Optional[int] = None
    # lr_scaling=table: global batch size -> learning rate.
    lr_table: Dict[int, float] = field(default_factory=dict)
    # sgd: momentum.
    momentum: float = 0.0


@dataclass
class TrainerConfig:
    # fit (Keras Model.fit) or ctl (custom training loop). Set by the option file.
    name: str = "fit"
    # Passes over the training data.
    epochs: int = 2
    # Steps per epoch (null: as many whole global batches as the training data holds).
    steps_per_epoch: Optional[int] = None
    # trainer=fit: batches run inside one tf.function call (Keras' steps_per_execution);
    # trainer=ctl: steps inside one tf.function call. null (auto): on one replica
    # (strategy default or one_device) with a Dense-only model (linear, mlp), whose steps
    # are mostly per-call overhead, the largest divisor of the steps per epoch up to 32;
    # else 1 (measured on CPU: it made the guide's linear model about 3x faster and the cnn
    # slower). Batch-level callbacks and trainer.log_every_n_steps then see one batch per
    # execution.
    steps_per_execution: Optional[int] = None
    # Compile the train step with XLA (slower than the default for small CPU models).
    jit_compile: bool = False
    # Keep the last K checkpoints written at the end of each epoch (0 disables them).
    keep_checkpoints: int = 2
    # Log loss to MLflow every N steps as well as every epoch (0: epochs only). Buffered
    # and written in batches, never one blocking call per step.
    log_every_n_steps: int = 0
    # Print a progress bar.
    progress: bool = True


@dataclass
class DevicesConfig:
    # Split the CPU into this many logical devices (TensorFlow's virtual devices), so that
    # mirrored and central_storage run that many replicas without a GPU. 1: no split.
    logical_cpus: int = 1


@dataclass
class TrackingConfig:
    # MLflow tracking URI (null: MLFLOW_TRACKING_URI, else sqlite:///<launch dir>/mlflow.db).
    uri: Optional[str] = None
    # MLflow experiment name.
    experiment: str = "xpdist"
    # Run name (null: derived from strategy, cross_ops or communication, and replicas).
    run_name: Optional[str] = None
    # Log the trained model as a .keras artifact.
    log_model: bool = True
    # Continue this FAILED or KILLED run (its id) from its last checkpoint, into the same
    # MLflow run; every other key must be as it was. null: a new run.
    resume: Optional[str] = None
    # Seconds between two heartbeats of the driver on its run (the xpdist.heartbeat tag).
    heartbeat_s: float = 10.0
    # A RUNNING run whose heartbeat is older than this many seconds (and than 3 of its own
    # heartbeat_s) is taken for lost and closed as FAILED by the next xpdist command on its
    # store, or by `python -m xpdist.tracking.reap`.
    heartbeat_timeout_s: float = 300.0


@dataclass
class Config:
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    cross_ops: CrossOpsConfig = field(default_factory=CrossOpsConfig)
    communication: CommunicationConfig = field(default_factory=CommunicationConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    devices: DevicesConfig = field(default_factory=DevicesConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # Keras flavour: auto, keras3 or legacy (tf-keras).
    keras: KerasFlavour = KerasFlavour.auto
    # Seed for weights, data and shuffling.
    seed: int = 42
    # Show TensorFlow's logs and full tracebacks.
    verbose: bool = False


# The config groups, in the order they appear in conf/config.yaml.
GROUPS = ("strategy", "cross_ops", "communication", "cluster", "model", "dataset", "optimizer", "trainer")


def register_configs() -> None:
    """Registers the schema as `base_config` in Hydra's ConfigStore.

    conf/config.yaml names it first in its defaults list, so every option file of every
    group is merged onto a typed node: an unknown key or a wrong type fails at compose time.
    """
    ConfigStore.instance().store(name="base_config", node=Config)
