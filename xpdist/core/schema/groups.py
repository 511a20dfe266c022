"""The schema of the config groups that tune a run's pieces: `cross_ops`, `communication`, `model`.

One dataclass per option, registered where it is defined (`@MODELS.register_schema`): the key
checks, --help and the configuration reference read the options from these registries
(xpdist/core/schema/__init__.py OPTIONS). This module imports no TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from xpdist.core import rules
from xpdist.core.registry import Registry
from xpdist.core.rules import open_mapping

CROSS_OPS: Registry[type] = Registry("cross_ops")
COMMUNICATIONS: Registry[type] = Registry("communication")
MODELS: Registry[type] = Registry("model")


# ---- cross_ops: MirroredStrategy's cross-device reduction --------------------------------------

@dataclass
class CrossOpsBase:
    # Fixed by each option: choose another with cross_ops=NAME.
    name: str = MISSING


@CROSS_OPS.register_schema
@dataclass
class AutoCrossOps(CrossOpsBase):
    name: str = "auto"


@dataclass
class PackedCrossOps(CrossOpsBase):
    # Gradients are packed into this many tensors before the all-reduce.
    num_packs: int = 1


@CROSS_OPS.register_schema
@dataclass
class NcclCrossOps(PackedCrossOps):
    name: str = "nccl"


@CROSS_OPS.register_schema
@dataclass
class HierarchicalCrossOps(PackedCrossOps):
    name: str = "hierarchical"


@CROSS_OPS.register_schema
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


@COMMUNICATIONS.register_schema
@dataclass
class AutoCommunication(CommunicationBase):
    name: str = "auto"


@COMMUNICATIONS.register_schema
@dataclass
class RingCommunication(CommunicationBase):
    name: str = "ring"


@COMMUNICATIONS.register_schema
@dataclass
class NcclCommunication(CommunicationBase):
    name: str = "nccl"


# ---- model ---------------------------------------------------------------------------------

@dataclass
class ModelBase:
    # Fixed by each option, and what the code dispatches on: choose another with model=NAME.
    name: str = MISSING


@dataclass
class RegularizedModel(ModelBase):
    # L2 factor on Dense kernels (the guide's linear model uses 1e-4).
    l2: float = field(default=1e-4, metadata=rules.at_least(0, "Use 0 for none."))


@MODELS.register_schema
@dataclass
class LinearModel(RegularizedModel):
    name: str = "linear"


@dataclass
class DropoutModel(RegularizedModel):
    # Dropout rate before the output layer (0 disables it).
    dropout: float = field(default=0.0, metadata=rules.fraction("Use e.g. 0.1, or 0 for none.", top=False))


@MODELS.register_schema
@dataclass
class MlpModel(DropoutModel):
    name: str = "mlp"
    # Sizes of the hidden Dense layers.
    hidden_units: List[int] = field(default_factory=lambda: [64, 64])


@MODELS.register_schema
@dataclass
class CnnModel(DropoutModel):
    name: str = "cnn"
    # Filters of each Conv2D block.
    filters: List[int] = field(default_factory=lambda: [32, 64])


@MODELS.register_schema
@dataclass
class CustomModel(ModelBase):
    name: str = "custom"
    # Dotted path of a function returning a Keras model, resolved with hydra.utils.get_method;
    # it is called with input_shape, num_outputs and the entries of `kwargs`.
    _target_: str = "xpdist.task.models.example_custom_model"
    # Extra keyword arguments for the function (empty by default: the function's own
    # defaults apply). Add one with model.kwargs.NAME=VALUE.
    kwargs: Dict[str, Any] = field(default_factory=open_mapping)


@MODELS.register_schema
@dataclass
class KerasAppModel(DropoutModel):
    name: str = "keras_app"
    # An architecture of keras.applications that Keras 3 and tf-keras both have (ResNet50,
    # MobileNetV2, EfficientNetB0, ...: xpdist/core/keras_apps.py lists them), built with
    # weights=None (nothing is downloaded) at the data set's image shape, without its top:
    # global average pooling, then one Dense output of logits.
    architecture: str = "ResNet50"


@MODELS.register_schema
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
