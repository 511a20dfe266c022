"""One builder per `strategy` option, plus the cross_ops and communication options.

Runs in the task process only (imports TensorFlow).
"""

from __future__ import annotations

from xpdist.core.clusterenv import slurm_tasks
from xpdist.core.plan import gpu_count
from xpdist.core.registry import Registry

STRATEGIES = Registry("strategy")


def configure_devices(tf, cfg) -> None:
    """Splits the CPU into devices.logical_cpus logical devices, before TF initialises."""
    n = int(cfg.devices.logical_cpus)
    if n > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)


def cross_device_ops(tf, cfg):
    """MirroredStrategy's cross_device_ops for cross_ops=<name> (None: TensorFlow's choice)."""
    ops = cfg.cross_ops
    if ops.name == "auto":
        return None
    if ops.name == "nccl":
        return tf.distribute.NcclAllReduce(num_packs=ops.num_packs)
    if ops.name == "hierarchical":
        return tf.distribute.HierarchicalCopyAllReduce(num_packs=ops.num_packs)
    if ops.name == "reduction_to_one_device":
        return tf.distribute.ReductionToOneDevice(reduce_to_device=ops.reduce_to_device or None)
    raise ValueError(f"cross_ops={ops.name} is unknown")


def communication_options(tf, cfg):
    impl = tf.distribute.experimental.CommunicationImplementation
    name = cfg.communication.name
    implementation = {"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}[name]
    return tf.distribute.experimental.CommunicationOptions(
        implementation=implementation, timeout_seconds=cfg.communication.timeout_seconds)


@STRATEGIES.register("default")
def _default(tf, cfg, plan):
    return tf.distribute.get_strategy()


@STRATEGIES.register("one_device")
def _one_device(tf, cfg, plan):
    return tf.distribute.OneDeviceStrategy(plan.devices[0])


@STRATEGIES.register("mirrored")
def _mirrored(tf, cfg, plan):
    return tf.distribute.MirroredStrategy(devices=plan.devices, cross_device_ops=cross_device_ops(tf, cfg))


@STRATEGIES.register("central_storage")
def _central_storage(tf, cfg, plan):
    return tf.distribute.experimental.CentralStorageStrategy(compute_devices=plan.devices)


@STRATEGIES.register("multi_worker_mirrored")
def _multi_worker_mirrored(tf, cfg, plan):
    resolver = slurm_resolver(tf, {"worker": slurm_tasks()}) if cfg.cluster.name == "slurm" else None
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver, communication_options=communication_options(tf, cfg))


def cluster_resolver(tf, cfg):
    """The parameter_server cluster: from TF_CONFIG, or from SLURM's environment.

    Under SLURM the tasks are laid out chief first (SLURM_PROCID 0, the coordinator), then
    cluster.ps parameter servers, then workers.
    """
    resolvers = tf.distribute.cluster_resolver
    if cfg.cluster.name != "slurm":
        return resolvers.TFConfigClusterResolver()
    tasks = slurm_tasks()
    ps = max(1, int(cfg.cluster.ps))
    return slurm_resolver(tf, {"chief": 1, "ps": ps, "worker": tasks - 1 - ps})


def slurm_resolver(tf, jobs):
    """The cluster of this srun step, laid out by TensorFlow's SlurmClusterResolver.

    Without GPUs SlurmClusterResolver cannot be used as it is: it counts GPUs with nvidia-smi
    (FileNotFoundError where there is none, tensorflow issue 56894), and it lays out one task
    per GPU slot, so gpus_per_node=0 yields no task at all and gpus_per_task=0 a ValueError.
    There it gets one nominal GPU slot per task with auto_set_gpu=False (so CUDA_VISIBLE_DEVICES
    stays untouched), and only its cluster spec and this task's place are kept, in a
    SimpleClusterResolver that reports no accelerator. Hostlist parsing, task order and ports
    (8888 + the task's index on its node) stay TensorFlow's.
    """
    resolvers = tf.distribute.cluster_resolver
    gpus = gpu_count()  # counts without nvidia-smi where it is absent
    if gpus:
        return resolvers.SlurmClusterResolver(jobs=jobs, gpus_per_node=gpus)
    tasks = sum(jobs.values())
    slurm = resolvers.SlurmClusterResolver(jobs=jobs, gpus_per_node=tasks, gpus_per_task=1, auto_set_gpu=False)
    spec = slurm.cluster_spec()  # also sets task_type and task_id
    return resolvers.SimpleClusterResolver(spec, task_type=slurm.task_type, task_id=slurm.task_id,
                                           num_accelerators={"GPU": 0}, rpc_layer=slurm.rpc_layer)


@STRATEGIES.register("parameter_server")
def _parameter_server(tf, cfg, plan):
    resolver = cluster_resolver(tf, cfg)
    return tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=variable_partitioner(tf, cfg, resolver))


def variable_partitioner(tf, cfg, resolver):
    st = cfg.strategy
    num_ps = len(resolver.cluster_spec().as_dict().get("ps", [])) or 1
    partitioners = tf.distribute.experimental.partitioners
    if st.variable_partitioner == "min_size":
        return partitioners.MinSizePartitioner(min_shard_bytes=st.min_shard_bytes, max_shards=st.max_shards or num_ps)
    if st.variable_partitioner == "fixed":
        return partitioners.FixedShardsPartitioner(num_shards=st.num_shards or num_ps)
    return None


@STRATEGIES.register("tpu")
def _tpu(tf, cfg, plan):
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=cfg.strategy.tpu or "local")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def build(tf, cfg, plan):
    """Builds the strategy of cfg.strategy.name, after configure_devices."""
    return STRATEGIES.get(cfg.strategy.name)(tf, cfg, plan)
