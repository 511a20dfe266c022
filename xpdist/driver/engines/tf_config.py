"""cluster=tf_config: a cluster manager (Kubeflow's TFJob, say) started this process as one task of
its cluster, and TF_CONFIG says which; its task process runs here with that environment.
Only the chief's driver records the run."""

from __future__ import annotations

import os

from xpdist.core.clusterenv import check_tf_config
from xpdist.driver.engines import Engine


class TfConfig(Engine):
    name = "tf_config"

    @classmethod
    def preflight(cls, cfg, needs) -> None:
        super().preflight(cfg, needs)
        check_tf_config(os.environ.get("TF_CONFIG"), cfg.strategy.name)


ENGINE = TfConfig
