"""xpdist: declarative tf.distribute experiments, Hydra configs in, MLflow runs out.

From Python: `xpdist.run(["strategy=mirrored", ...])` runs one experiment and returns its
run id, status and final metrics (xpdist/api.py; standard library only, so importing the
package stays cheap in the task process too).
"""

from xpdist.api import ConfigRejected, Result, RunFailed, run

__all__ = ["ConfigRejected", "Result", "RunFailed", "run"]
__version__ = "0.1.0"
