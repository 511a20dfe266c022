"""strategy=parameter_server: ParameterServerStrategy; the chief coordinates, worker and ps tasks serve."""

from __future__ import annotations

from xpdist.core.clusterenv import ClusterEnv, slurm_tasks
from xpdist.task.strategies import strategy_class
from xpdist.task.strategies._slurm import slurm_resolver


def cluster_resolver(tf, cfg):
    """The parameter_server cluster: from TF_CONFIG, or from SLURM's environment.

    Tasks srun started are laid out chief first (SLURM_PROCID 0, the coordinator), then
    cluster.ps parameter servers, then workers.
    """
    resolvers = tf.distribute.cluster_resolver
    if not ClusterEnv.from_environ(cfg.cluster.name).srun_started:
        return resolvers.TFConfigClusterResolver()
    tasks = slurm_tasks()
    ps = max(1, int(cfg.cluster.ps))
    return slurm_resolver(tf, {"chief": 1, "ps": ps, "worker": tasks - 1 - ps}, cfg.cluster.port_base)


def server(tf, cfg):
    """This task's resolver if it is a worker or ps task (it serves the coordinator), else None."""
    resolver = cluster_resolver(tf, cfg)
    return resolver if resolver.task_type in ("worker", "ps") else None


def build(tf, cfg, plan):
    resolver = cluster_resolver(tf, cfg)
    return strategy_class(tf, cfg, tf.distribute.experimental.ParameterServerStrategy)(
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
