"""strategy=multi_worker_mirrored: MultiWorkerMirroredStrategy, collectives set by the communication option."""

from __future__ import annotations

from xpdist.core.clusterenv import ClusterEnv, slurm_tasks
from xpdist.task.strategies import strategy_class
from xpdist.task.strategies._slurm import slurm_resolver

# communication option -> the name of its tf.distribute.experimental.CommunicationImplementation.
IMPLEMENTATIONS = {"auto": "AUTO", "ring": "RING", "nccl": "NCCL"}


def communication_options(tf, cfg):
    implementation = getattr(tf.distribute.experimental.CommunicationImplementation,
                             IMPLEMENTATIONS[cfg.communication.name])
    return tf.distribute.experimental.CommunicationOptions(
        implementation=implementation, timeout_seconds=cfg.communication.timeout_seconds)


def build(tf, cfg, plan):
    # Started by srun, every task is a worker; elsewhere TF_CONFIG describes the cluster.
    srun = ClusterEnv.from_environ(cfg.cluster.name).srun_started
    resolver = slurm_resolver(tf, {"worker": slurm_tasks()}, cfg.cluster.port_base) if srun else None
    return strategy_class(tf, cfg, tf.distribute.MultiWorkerMirroredStrategy)(
        cluster_resolver=resolver, communication_options=communication_options(tf, cfg))
