"""strategy=multi_worker_mirrored: MultiWorkerMirroredStrategy, collectives set by the communication option."""

from __future__ import annotations

from xpdist.core.clusterenv import slurm_tasks
from xpdist.task.strategies._slurm import slurm_resolver

# communication option -> the name of its tf.distribute.experimental.CommunicationImplementation.
IMPLEMENTATIONS = {"auto": "AUTO", "ring": "RING", "nccl": "NCCL"}


def communication_options(tf, cfg):
    implementation = getattr(tf.distribute.experimental.CommunicationImplementation,
                             IMPLEMENTATIONS[cfg.communication.name])
    return tf.distribute.experimental.CommunicationOptions(
        implementation=implementation, timeout_seconds=cfg.communication.timeout_seconds)


def build(tf, cfg, plan):
    # Under SLURM every srun task is a worker; elsewhere TF_CONFIG describes the cluster.
    resolver = slurm_resolver(tf, {"worker": slurm_tasks()}) if cfg.cluster.name == "slurm" else None
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver, communication_options=communication_options(tf, cfg))
