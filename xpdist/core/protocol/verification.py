"""What `python -m xpdist verify` and the task's recorder share: where the recorder writes.

The verify command (xpdist/verify/) runs two trainings through the driver's job machinery and
tells each training's tasks, through two environment variables, that they are recorded:

    XPDIST_VERIFY_DIR    the folder the chief task writes steps.json and final.npz to (and,
                         in the reference, initial.npz: the weights before the first step)
    XPDIST_VERIFY_INIT   an initial.npz every task loads into its model before the first step,
                         so the distributed run starts from the reference's very weights

Environment variables rather than a config key: the recorder is not part of the user's
configuration (it would be logged as a param and listed in --help), and the engines pass
XPDIST_* variables on to every task, Ray's included. Neither TensorFlow nor MLflow here.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

RECORD_ENV = "XPDIST_VERIFY_DIR"
INIT_ENV = "XPDIST_VERIFY_INIT"

STEPS_FILE = "steps.json"
FINAL_FILE = "final.npz"
INITIAL_FILE = "initial.npz"


@dataclass
class StepRecord:
    """A training's per-step figures, as its chief task saw them.

    loss: the step's training loss (under fit derived from Keras' running mean of the epoch).
    update_norm: the L2 norm of the change of all trainable weights made by the step: the
    stand-in for the gradient norm that both trainers can report without touching the model.
    """

    trainer: str
    loss: List[float] = field(default_factory=list)
    update_norm: List[float] = field(default_factory=list)
    # Whether the weights were loaded from XPDIST_VERIFY_INIT (False: built from the seed alone).
    loaded_initial: bool = False
    # Each variable's largest difference between its copies on the chief's replicas (0 with one).
    replica_spread: Dict[str, float] = field(default_factory=dict)

    def write(self, folder: Path) -> None:
        data = asdict(self)
        # JSON has no NaN: non-finite values travel as strings.
        for key in ("loss", "update_norm"):
            data[key] = [v if math.isfinite(v) else repr(v) for v in data[key]]
        data["replica_spread"] = {k: v if math.isfinite(v) else repr(v) for k, v in self.replica_spread.items()}
        (folder / STEPS_FILE).write_text(json.dumps(data))

    @classmethod
    def read(cls, folder: Path) -> Optional["StepRecord"]:
        path = folder / STEPS_FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        for key in ("loss", "update_norm"):
            data[key] = [float(v) for v in data[key]]
        data["replica_spread"] = {k: float(v) for k, v in data.get("replica_spread", {}).items()}
        return cls(**data)
