"""The config schema: one dataclass per option of each Hydra config group.

Each option's dataclass is stored in Hydra's ConfigStore as `<group>/base_<name>`, and the
option's YAML file (conf/<group>/<name>.yaml) extends it through its defaults list, carrying
values only. So a key that the chosen option does not have (`model=linear model.filters=[8]`),
a misspelled key or a wrong type fails when Hydra composes the config, with Hydra's message.
`name` is fixed by each option's dataclass: the code dispatches on it, and no file repeats it.
This module imports no TensorFlow: the process that composes configs never needs it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Dict, List, Mapping, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from xpdist.core import docs
from xpdist.core.errors import ConfigError, did_you_mean
from xpdist.core.schema_data import DATASETS, AutoShardPolicy, Compression, DatasetBase  # noqa: F401  (enums named here for scripts/config_docs.py)
from xpdist.core.schema_training import CALLBACKS, LOSSES, SCHEDULES, LossBase, ScheduleBase


def _open_mapping() -> DictConfig:
    """An empty mapping whose keys are the user's own: `model.kwargs.units=32` adds one, no `+`.

    Hydra closes every node of the composed config (struct mode), typed `Dict[K, V]` mappings
    included, so a new key would need `+`. A node that sets its own struct flag to False keeps
    it through composition: the keys of a user's function or feature spec cannot be known here.
    """
    return OmegaConf.create({}, flags={"struct": False})


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


class ResizeKeep(Enum):
    # The global batch and learning rate stay; each replica's batch is re-derived.
    global_batch = 0
    # Each replica's batch stays; the global batch follows the replicas, the learning rate
    # follows optimizer.lr_scaling, reached by a warmup (tracking.resize_warmup_steps).
    per_replica_batch = 1


class Precision(Enum):
    # Every variable and computation in float32.
    float32 = 0
    # float16 computations, float32 variables, dynamic loss scaling (GPUs with tensor cores).
    mixed_float16 = 1
    # bfloat16 computations, float32 variables, no loss scaling needed (TPUs, recent GPUs and CPUs).
    mixed_bfloat16 = 2


class Partitioner(Enum):
    # Variables are not sharded across parameter servers.
    none = 0
    # tf.distribute.experimental.partitioners.MinSizePartitioner.
    min_size = 1
    # tf.distribute.experimental.partitioners.FixedShardsPartitioner.
    fixed = 2


# ---- strategy: which tf.distribute strategy trains -------------------------------------------

@dataclass
class StrategyBase:
    # Fixed by each option, and what the code dispatches on: choose another with strategy=NAME.
    name: str = MISSING


@dataclass
class DefaultStrategy(StrategyBase):
    name: str = "default"


@dataclass
class ClassStrategy(StrategyBase):
    # Your own subclass of this option's TensorFlow class (module.Class), built with the same
    # arguments; the option's plan, checks and cluster stay. null: TensorFlow's class.
    _target_: Optional[str] = None


@dataclass
class LocalDevicesStrategy(ClassStrategy):
    # Devices to use, e.g. ["/cpu:0", "/cpu:1"]. Empty: every visible GPU, else every
    # (logical) CPU.
    devices: List[str] = field(default_factory=list)


@dataclass
class OneDeviceStrategy(LocalDevicesStrategy):
    name: str = "one_device"
    # The device to train on, as a list of which only the first entry is used, e.g. ["/gpu:1"].
    # Empty: the first GPU, else /cpu:0.
    devices: List[str] = field(default_factory=list)


@dataclass
class MirroredStrategy(LocalDevicesStrategy):
    name: str = "mirrored"


@dataclass
class CentralStorageStrategy(LocalDevicesStrategy):
    name: str = "central_storage"


@dataclass
class MultiWorkerMirroredStrategy(ClassStrategy):
    name: str = "multi_worker_mirrored"


@dataclass
class ParameterServerStrategy(ClassStrategy):
    name: str = "parameter_server"
    # How variables are sharded over the parameter servers: none, min_size or fixed.
    variable_partitioner: Partitioner = Partitioner.none
    # variable_partitioner=min_size: smallest shard, in bytes (default 256 KiB).
    min_shard_bytes: int = 256 << 10
    # variable_partitioner=min_size: at most this many shards (null: one per parameter server).
    max_shards: Optional[int] = None
    # variable_partitioner=fixed: exactly this many shards (null: one per parameter server).
    num_shards: Optional[int] = None


@dataclass
class TpuStrategy(ClassStrategy):
    name: str = "tpu"
    # The TPU name or grpc:// address handed to TPUClusterResolver; "local" for a TPU VM's
    # own chips.
    tpu: str = "local"


# ---- cross_ops: MirroredStrategy's cross-device reduction --------------------------------------

@dataclass
class CrossOpsBase:
    # Fixed by each option: choose another with cross_ops=NAME.
    name: str = MISSING


@dataclass
class AutoCrossOps(CrossOpsBase):
    name: str = "auto"


@dataclass
class PackedCrossOps(CrossOpsBase):
    # Gradients are packed into this many tensors before the all-reduce.
    num_packs: int = 1


@dataclass
class NcclCrossOps(PackedCrossOps):
    name: str = "nccl"


@dataclass
class HierarchicalCrossOps(PackedCrossOps):
    name: str = "hierarchical"


@dataclass
class ReductionToOneDeviceCrossOps(CrossOpsBase):
    name: str = "reduction_to_one_device"
    # The device that reduces ("": TensorFlow chooses).
    reduce_to_device: str = ""


# ---- communication: MultiWorkerMirroredStrategy's collectives ----------------------------------

@dataclass
class CommunicationBase:
    # Fixed by each option: choose another with communication=NAME.
    name: str = MISSING
    # Give up on a collective after this many seconds (null: wait forever).
    timeout_seconds: Optional[float] = None


@dataclass
class AutoCommunication(CommunicationBase):
    name: str = "auto"


@dataclass
class RingCommunication(CommunicationBase):
    name: str = "ring"


@dataclass
class NcclCommunication(CommunicationBase):
    name: str = "nccl"


# ---- cluster: where the task processes run -----------------------------------------------------

@dataclass
class ClusterBase:
    # Fixed by each option: choose another with cluster=NAME.
    name: str = MISSING
    # Your own subclass of this option's engine class (module.Class, see docs/contributing.md,
    # "Adding an engine"), run in its place with the option's keys. null: xpdist's engine.
    _target_: Optional[str] = None
    # Not a key: where each task learns its part of the cluster (core/clusterenv.py places):
    # nothing to read for one process, the TF_CONFIG variable, or srun's SLURM_* variables.
    place: ClassVar[str] = ""


@dataclass
class LocalCluster(ClusterBase):
    name: str = "local"


@dataclass
class LocalhostCluster(ClusterBase):
    name: str = "localhost"
    place: ClassVar[str] = "TF_CONFIG"
    # Number of worker processes.
    workers: int = 2
    # Number of parameter-server processes (strategy=parameter_server only).
    ps: int = 0
    # Restart the whole cluster this many times after a task is killed by
    # a signal, is lost, or fails with a network-type error (UnavailableError,
    # DeadlineExceeded, a connection reset); never after an exception in user code or
    # config. Training resumes from the last completed epoch.
    max_restarts: int = 0
    # Seconds to wait for every task to start before giving up.
    start_timeout_s: float = 120.0


@dataclass
class TfConfigCluster(ClusterBase):
    name: str = "tf_config"
    place: ClassVar[str] = "TF_CONFIG"


@dataclass
class SlurmCluster(ClusterBase):
    name: str = "slurm"
    place: ClassVar[str] = "SLURM"
    # strategy=parameter_server: SLURM tasks after the chief that are parameter servers.
    ps: int = 0
    # The task with index i on its node listens on port_base + i (SlurmClusterResolver's
    # layout); move it where 8888 and up are taken on the nodes.
    port_base: int = 8888


class RayPlacement(Enum):
    # One task per node where the cluster has nodes enough (Ray's SPREAD, best effort).
    spread = 0
    # As few nodes as possible (Ray's PACK, best effort).
    pack = 1


@dataclass
class RayCluster(ClusterBase):
    name: str = "ray"
    place: ClassVar[str] = "TF_CONFIG"
    # The Ray cluster: auto (the one this machine belongs to: RAY_ADDRESS or `ray start`),
    # local (a private one-node Ray started for the run and stopped after), or host:port of
    # the head's GCS (run xpdist on a node of that cluster).
    address: str = "auto"
    # Number of worker tasks (strategy=parameter_server adds a chief, the coordinator).
    workers: int = 2
    # Number of parameter-server tasks (strategy=parameter_server only).
    ps: int = 0
    # CPUs Ray reserves for each task (its bundle in the placement group).
    cpus_per_task: float = 1.0
    # GPUs Ray reserves for each task; Ray sets CUDA_VISIBLE_DEVICES for it.
    gpus_per_task: float = 0.0
    # Custom Ray resources each task needs, e.g. {accelerator_a: 1}; empty: none.
    resources: Dict[str, float] = field(default_factory=_open_mapping)
    # How the placement group lays the tasks on nodes: spread or pack.
    placement: RayPlacement = RayPlacement.spread
    # Restart every task this many times after a task or its node is lost, or fails with a
    # network-type error; never after an exception in user code or config.
    max_restarts: int = 0
    # Seconds to wait for the placement group, then for every task to start.
    start_timeout_s: float = 120.0
    # Shared storage every node mounts at the same path (NFS, a bucket's FUSE mount), for the
    # checkpoints and backups a restarted task resumes from on another node; null: each task
    # keeps them on its node and the driver brings the chief's back (a restart on the same nodes resumes).
    checkpoint_dir: Optional[str] = None


# ---- model ---------------------------------------------------------------------------------

@dataclass
class ModelBase:
    # Fixed by each option, and what the code dispatches on: choose another with model=NAME.
    name: str = MISSING


@dataclass
class RegularizedModel(ModelBase):
    # L2 factor on Dense kernels (the guide's linear model uses 1e-4).
    l2: float = 1e-4


@dataclass
class LinearModel(RegularizedModel):
    name: str = "linear"


@dataclass
class DropoutModel(RegularizedModel):
    # Dropout rate before the output layer (0 disables it).
    dropout: float = 0.0


@dataclass
class MlpModel(DropoutModel):
    name: str = "mlp"
    # Sizes of the hidden Dense layers.
    hidden_units: List[int] = field(default_factory=lambda: [64, 64])


@dataclass
class CnnModel(DropoutModel):
    name: str = "cnn"
    # Filters of each Conv2D block.
    filters: List[int] = field(default_factory=lambda: [32, 64])


@dataclass
class CustomModel(ModelBase):
    name: str = "custom"
    # Dotted path of a function returning a Keras model, resolved with hydra.utils.get_method;
    # it is called with input_shape, num_outputs and the entries of `kwargs`.
    _target_: str = "xpdist.task.models.example_custom_model"
    # Extra keyword arguments for the function (empty by default: the function's own
    # defaults apply). Add one with model.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=_open_mapping)


@dataclass
class KerasAppModel(DropoutModel):
    name: str = "keras_app"
    # An architecture of keras.applications that Keras 3 and tf-keras both have (ResNet50,
    # MobileNetV2, EfficientNetB0, ...: xpdist/core/keras_apps.py lists them), built with
    # weights=None (nothing is downloaded) at the data set's image shape, without its top:
    # global average pooling, then one Dense output of logits.
    architecture: str = "ResNet50"


@dataclass
class TransformerModel(DropoutModel):
    name: str = "transformer"
    # Encoder blocks (self-attention + feed-forward, each with a residual and LayerNorm).
    num_layers: int = 2
    # Attention heads per block; width must be a multiple of it.
    num_heads: int = 4
    # Embedding width (the model dimension).
    width: int = 64
    # Hidden units of each block's feed-forward layer.
    ff_width: int = 128
    # Token ids are 0..vocab_size-1; null: the data set's dataset.vocab_size. The sequence
    # length is the data's.
    vocab_size: Optional[int] = None


# ---- dataset: xpdist/core/schema_data.py -----------------------------------------------------


# ---- optimizer -----------------------------------------------------------------------------

@dataclass
class OptimizerBase:
    # Fixed by each option: choose another with optimizer=NAME.
    name: str = MISSING
    # Base learning rate, before optimizer.lr_scaling.
    learning_rate: float = 0.01
    # How the learning rate follows the global batch: none, linear, sqrt or table.
    lr_scaling: LrScaling = LrScaling.none
    # lr_scaling=linear/sqrt: the batch size learning_rate was tuned for (null: the
    # per-replica batch size, so the rate scales with the number of replicas).
    reference_batch_size: Optional[int] = None
    # lr_scaling=table: global batch size -> learning rate.
    lr_table: Dict[int, float] = field(default_factory=dict)
    # Clip the gradients so that their global norm is at most this (null: no clipping).
    global_clipnorm: Optional[float] = None
    # Clip each gradient to this norm (null: no clipping).
    clipnorm: Optional[float] = None
    # Clip each gradient's values to [-clipvalue, clipvalue] (null: no clipping).
    clipvalue: Optional[float] = None
    # Decoupled weight decay per step, as a fraction of the learning rate (null: none).
    weight_decay: Optional[float] = None
    # Keep an exponential moving average of the weights and use it as the final weights.
    use_ema: bool = False
    # Apply the summed gradients of this many steps at once (null: every step; Keras 3 only).
    gradient_accumulation_steps: Optional[int] = None


@dataclass
class SgdOptimizer(OptimizerBase):
    name: str = "sgd"
    # Momentum.
    momentum: float = 0.0


@dataclass
class AdamOptimizer(OptimizerBase):
    name: str = "adam"
    learning_rate: float = 0.001


@dataclass
class MomentsOptimizer(OptimizerBase):
    learning_rate: float = 0.001
    # Decay rate of the first moment estimates.
    beta_1: float = 0.9
    # Decay rate of the second moment estimates.
    beta_2: float = 0.999


@dataclass
class AdamWOptimizer(MomentsOptimizer):
    name: str = "adamw"
    weight_decay: Optional[float] = 0.004
    # Added to the denominator for numerical stability.
    epsilon: float = 1e-7


@dataclass
class LambOptimizer(MomentsOptimizer):
    name: str = "lamb"
    # Added to the denominator for numerical stability.
    epsilon: float = 1e-6


@dataclass
class LionOptimizer(MomentsOptimizer):
    name: str = "lion"
    learning_rate: float = 0.0001
    beta_2: float = 0.99


@dataclass
class RmspropOptimizer(OptimizerBase):
    name: str = "rmsprop"
    learning_rate: float = 0.001
    # Decay rate of the moving average of squared gradients.
    rho: float = 0.9
    # Momentum.
    momentum: float = 0.0
    # Normalize by the gradients' estimated variance rather than their second moment.
    centered: bool = False


@dataclass
class AdagradOptimizer(OptimizerBase):
    name: str = "adagrad"
    learning_rate: float = 0.001
    # Starting value of the per-parameter accumulators.
    initial_accumulator_value: float = 0.1


@dataclass
class CustomOptimizer(OptimizerBase):
    name: str = "custom"
    learning_rate: float = 0.001
    # Dotted path of a Keras optimizer class, called with learning_rate (the schedule, if
    # any), the shared keys that are set, and `kwargs`; a `keras.` path is taken from the
    # run's Keras (Keras 3 or tf-keras).
    _target_: str = "keras.optimizers.Adamax"
    # Keyword arguments for the class. Add one with optimizer.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=_open_mapping)


# ---- trainer -------------------------------------------------------------------------------

@dataclass
class TrainerBase:
    # Fixed by each option: choose another with trainer=NAME.
    name: str = MISSING
    # Passes over the training data.
    epochs: int = 2
    # Steps per epoch (null: as many whole global batches as the training data holds).
    steps_per_epoch: Optional[int] = None
    # Training steps inside one tf.function call (Keras' steps_per_execution under fit).
    # null (auto): on one replica (strategy default or one_device) with a Dense-only model
    # (linear, mlp), whose steps are mostly per-call overhead, the largest divisor of the
    # steps per epoch up to 32; else 1 (measured on CPU: it made the guide's linear model
    # about 3x faster and the cnn slower). Batch-level callbacks and
    # trainer.log_every_n_steps then see one batch per execution.
    steps_per_execution: Optional[int] = None
    # Keras mixed-precision policy, set before the model is built; the model's output stays
    # float32. mixed_float16 scales the loss (see docs/performance.md for which to choose).
    precision: Precision = Precision.float32
    # Compile the train step with XLA: auto (Keras' choice under fit, off under ctl), true
    # or false. Slower than the default for small models on CPU.
    jit_compile: str = "auto"
    # Keep the last K checkpoints written at the end of each epoch (0 disables them).
    keep_checkpoints: int = 2
    # Log loss to MLflow every N steps as well as every epoch (0: epochs only). Buffered
    # and written in batches, never one blocking call per step.
    log_every_n_steps: int = 0
    # Print a progress bar.
    progress: bool = True
    # Keras metrics recorded each epoch, for training and (as val_NAME) validation: Keras
    # identifiers such as [auc, binary_accuracy, precision], or {_target_: CLASS, KEY: VALUE}
    # entries. Empty: mae (regression) or accuracy (classification).
    metrics: List[Any] = field(default_factory=list)
    # [first, last]: trace these training steps (counted from 0 over the run; under fit with
    # steps_per_execution above 1, the calls that hold them) with TensorFlow's profiler, in
    # every task that trains; the epochs traced in are left out of steady_examples_per_sec.
    # The trace is logged as the run's profile/ artifact, and the chief's split of their time
    # (input wait, communication, compute) as metrics. Empty: no trace.
    profile_steps: List[int] = field(default_factory=list)


@dataclass
class FitTrainer(TrainerBase):
    name: str = "fit"


@dataclass
class CtlTrainer(TrainerBase):
    name: str = "ctl"


# ---- keys outside the groups ---------------------------------------------------------------

@dataclass
class DevicesConfig:
    # Split the CPU into this many logical devices (TensorFlow's virtual devices), so that
    # mirrored and central_storage run that many replicas without a GPU. 1: no split.
    logical_cpus: int = 1
    # Peak FLOP/s of all the devices the run trains on together, for the run's mfu (achieved
    # FLOP/s / this). null: from xpdist/task/flops.py's table of GPUs, times the GPUs that
    # train; on a CPU or an unlisted device no mfu is logged.
    peak_flops: Optional[float] = None


@dataclass
class TrackingConfig:
    # MLflow tracking URI (null: MLFLOW_TRACKING_URI, else sqlite:///<launch dir>/mlflow.db).
    uri: Optional[str] = None
    # MLflow experiment name.
    experiment: str = "xpdist"
    # Run name (null: derived from strategy, cross_ops or communication, and replicas).
    run_name: Optional[str] = None
    # Log the trained model as the run's `model`: an MLflow model (mlflow.keras flavour, or
    # mlflow.tensorflow under tf-keras) with signature and input example, and model.keras.
    log_model: bool = True
    # Continue this FAILED or KILLED run (its id) from its last checkpoint, into the same
    # MLflow run; every other key must be as it was, but the size keys (devices.logical_cpus,
    # cluster.workers, cluster.ps: docs/lifecycle.md). null: a new run.
    resume: Optional[str] = None
    # A resumed run at another replica count (devices.logical_cpus, cluster.workers, ...):
    # keep its global batch (and learning rate), or its per-replica batch (docs/lifecycle.md).
    resize_keep: ResizeKeep = ResizeKeep.global_batch
    # resize_keep=per_replica_batch: optimizer steps over which the learning rate rises from
    # the run's last rate to the new one (null: the schedule's warmup_epochs, else one epoch; 0: at once).
    resize_warmup_steps: Optional[int] = None
    # Seconds between two heartbeats of the driver on its run (the xpdist.heartbeat tag).
    heartbeat_s: float = 10.0
    # A RUNNING run whose heartbeat is older than this many seconds (and than 3 of its own
    # heartbeat_s) is taken for lost and closed as FAILED by the next xpdist command on its
    # store, or by `python -m xpdist.tracking.reap`.
    heartbeat_timeout_s: float = 300.0
    # Register the logged model under this name in the Model Registry, a new version per run.
    register_model: Optional[str] = None
    # Point this alias of the registered model at the run's version (models:/NAME@ALIAS loads it).
    model_alias: Optional[str] = None
    # Record CPU, memory and (where present) GPU figures as system/... metrics.
    system_metrics: bool = True
    # Seconds between two system metric samples.
    system_metrics_interval_s: float = 10.0


@dataclass
class Config:
    strategy: StrategyBase = MISSING
    cross_ops: CrossOpsBase = MISSING
    communication: CommunicationBase = MISSING
    cluster: ClusterBase = MISSING
    model: ModelBase = MISSING
    dataset: DatasetBase = MISSING
    optimizer: OptimizerBase = MISSING
    trainer: TrainerBase = MISSING
    loss: LossBase = MISSING
    schedule: ScheduleBase = MISSING
    # Keras callbacks, several at once: callbacks=[early_stopping,terminate_on_nan]; each
    # chosen option fills its own key (callbacks.early_stopping.patience=3).
    callbacks: Dict[str, Any] = field(default_factory=dict)
    devices: DevicesConfig = field(default_factory=DevicesConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # Keras flavour: auto, keras3 or legacy (tf-keras).
    keras: KerasFlavour = KerasFlavour.auto
    # Seed for weights, data and shuffling.
    seed: int = 42
    # Show TensorFlow's logs and full tracebacks.
    verbose: bool = False


def _by_name(*classes: type) -> Dict[str, type]:
    return {cls.name: cls for cls in classes}


# Every option of every config group, by group and name, in the order of conf/config.yaml.
OPTIONS: Dict[str, Dict[str, type]] = {
    "strategy": _by_name(DefaultStrategy, OneDeviceStrategy, MirroredStrategy, CentralStorageStrategy,
                         MultiWorkerMirroredStrategy, ParameterServerStrategy, TpuStrategy),
    "cross_ops": _by_name(AutoCrossOps, NcclCrossOps, HierarchicalCrossOps, ReductionToOneDeviceCrossOps),
    "communication": _by_name(AutoCommunication, RingCommunication, NcclCommunication),
    "cluster": _by_name(LocalCluster, LocalhostCluster, TfConfigCluster, SlurmCluster, RayCluster),
    "model": _by_name(LinearModel, MlpModel, CnnModel, KerasAppModel, TransformerModel, CustomModel),
    "dataset": DATASETS,
    "optimizer": _by_name(SgdOptimizer, AdamOptimizer, AdamWOptimizer, RmspropOptimizer, AdagradOptimizer,
                          LionOptimizer, LambOptimizer, CustomOptimizer),
    "trainer": _by_name(FitTrainer, CtlTrainer),
    "loss": LOSSES,
    "schedule": SCHEDULES,
}
# The config groups of which one option is chosen, in the order they appear in conf/config.yaml.
GROUPS = tuple(OPTIONS)
# Groups of which several options are chosen at once: each option fills its own key of the group.
MULTI_GROUPS: Dict[str, Dict[str, type]] = {"callbacks": CALLBACKS}
# The prefix of the ConfigStore entry an option file extends: defaults: [base_<name>].
SCHEMA_PREFIX = "base_"


def register_configs() -> None:
    """Stores the schema in Hydra's ConfigStore: `base_config`, and `<group>/base_<name>` per option.

    conf/config.yaml names base_config first in its defaults list, and each option file
    names its own base_<name>: every key of every option is typed, and a key the chosen
    option does not have fails at compose time.
    """
    store = ConfigStore.instance()
    store.store(name="base_config", node=Config)
    for group, options in OPTIONS.items():
        for name, cls in options.items():
            store.store(group=group, name=SCHEMA_PREFIX + name, node=cls)
    for group, options in MULTI_GROUPS.items():
        for name, cls in options.items():  # conf/callbacks/x.yaml fills callbacks.x
            store.store(group=group, name=SCHEMA_PREFIX + name, node={name: cls})


def fields_of(cls: type) -> List[str]:
    return [f.name for f in dataclasses.fields(cls)]


def check_keys(config: Mapping[str, Any]) -> None:
    """Refuses keys that the schema of the chosen options does not know.

    Hydra lets `+group.key=value` append a key to any node, even a typed one, and no code
    would ever read it: a misspelled `+trainer.epoch=3` would be silently ignored. A key
    that is missing means `<group>.name` was overridden with another option's name.

    Args:
        config: the composed config as plain data, without the hydra node.

    Raises:
        ConfigError: naming the first unknown key.
    """
    _refuse_unknown(config, Config, "", "the config")
    for key, cls in (("devices", DevicesConfig), ("tracking", TrackingConfig)):
        _refuse_unknown(config[key], cls, f"{key}.", key)
    for group, options in MULTI_GROUPS.items():
        for name, value in config[group].items():
            if name not in options:
                raise ConfigError(f"{group}.{name}", value, f"{group} has no option {name}",
                                  f"Choose among {group}=[{','.join(options)}].")
            _refuse_unknown(value, options[name], f"{group}.{name}.", f"{group}={name}")
    for group, options in OPTIONS.items():
        name = config[group].get("name")
        if name not in options:
            raise ConfigError(f"{group}.name", name, f"{group}.name is fixed by each {group} option",
                              f"Choose one of {group}={', '.join(options)}.")
        _refuse_unknown(config[group], options[name], f"{group}.", f"{group}={name}")
        if set(config[group]) != set(fields_of(options[name])):
            raise ConfigError(f"{group}.name", name, f"{group}.name is fixed by each {group} option",
                              f"Choose the option instead: {group}={name}.")


def _refuse_unknown(node: Mapping[str, Any], cls: type, prefix: str, owner: str) -> None:
    known = fields_of(cls)
    for key, value in node.items():
        if key not in known:
            full = f"{prefix}{key}"
            while isinstance(value, Mapping) and len(value) == 1:  # +a.b=1 appended {'b': 1} at a
                inner, value = next(iter(value.items()))
                full += f".{inner}"
            hint = did_you_mean(key, known, prefix).strip()
            raise ConfigError(full, value, f"{owner} has no key '{key}', so nothing would read it",
                              f"{hint + ' Otherwise drop' if hint else 'Drop'} it; the keys of {owner} are: "
                              f"{', '.join(known)} (see {docs.page()}).")
