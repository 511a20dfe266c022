"""SLURM's cluster for the strategies that run on several tasks (not a strategy: the loader skips it)."""

from __future__ import annotations

from xpdist.core.devices import gpu_count


def slurm_resolver(tf, jobs, port_base):
    """The cluster of this srun step, laid out by TensorFlow's SlurmClusterResolver.

    Without GPUs SlurmClusterResolver cannot be used as it is: it counts GPUs with nvidia-smi
    (FileNotFoundError where there is none, tensorflow issue 56894), and it lays out one task
    per GPU slot, so gpus_per_node=0 yields no task at all and gpus_per_task=0 a ValueError.
    There it gets one nominal GPU slot per task with auto_set_gpu=False (so CUDA_VISIBLE_DEVICES
    stays untouched), and only its cluster spec and this task's place are kept, in a
    SimpleClusterResolver that reports no accelerator. Hostlist parsing, task order and ports
    (port_base, cluster.port_base, + the task's index on its node) stay TensorFlow's.
    """
    resolvers = tf.distribute.cluster_resolver
    gpus = gpu_count()  # counts without nvidia-smi where it is absent
    if gpus:
        return resolvers.SlurmClusterResolver(jobs=jobs, port_base=port_base, gpus_per_node=gpus)
    tasks = sum(jobs.values())
    slurm = resolvers.SlurmClusterResolver(jobs=jobs, port_base=port_base, gpus_per_node=tasks, gpus_per_task=1,
                                          auto_set_gpu=False)
    spec = slurm.cluster_spec()  # also sets task_type and task_id
    return resolvers.SimpleClusterResolver(spec, task_type=slurm.task_type, task_id=slurm.task_id,
                                           num_accelerators={"GPU": 0}, rpc_layer=slurm.rpc_layer)
