"""xpdist: declarative tf.distribute experiments, Hydra configs in, MLflow runs out.

From Python: `xpdist.run(["strategy=mirrored", ...])` runs one experiment and returns its
run id, status and final metrics; `xpdist.sweep(["strategy=one_device,mirrored", ...])` runs a
sweep and returns its parent run id and its jobs' runs (xpdist/api.py; standard library only,
so importing the package stays cheap in the task process too).
"""

from xpdist.api import ConfigRejected, Result, RunFailed, SweepJob, SweepResult, run, sweep

__all__ = ["ConfigRejected", "Result", "RunFailed", "SweepJob", "SweepResult", "run", "sweep"]
__version__ = "0.1.0"
