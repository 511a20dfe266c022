"""The architectures of `model=keras_app`, known without TensorFlow (the driver checks them).

ARCHITECTURES lists the keras.applications models that Keras 3 (3.15) and tf-keras (2.21)
both have, so a run builds the same model whichever Keras trains it; tf-keras's RegNet and
ResNetRS families are left out for that reason. tests/integration/test_real_models.py checks
the list against both flavours' keras.applications.
"""

from __future__ import annotations

from typing import Dict, Tuple

ARCHITECTURES: Tuple[str, ...] = (
    "ConvNeXtBase", "ConvNeXtLarge", "ConvNeXtSmall", "ConvNeXtTiny", "ConvNeXtXLarge",
    "DenseNet121", "DenseNet169", "DenseNet201",
    "EfficientNetB0", "EfficientNetB1", "EfficientNetB2", "EfficientNetB3", "EfficientNetB4", "EfficientNetB5",
    "EfficientNetB6", "EfficientNetB7",
    "EfficientNetV2B0", "EfficientNetV2B1", "EfficientNetV2B2", "EfficientNetV2B3", "EfficientNetV2L",
    "EfficientNetV2M", "EfficientNetV2S",
    "InceptionResNetV2", "InceptionV3", "MobileNet", "MobileNetV2", "MobileNetV3Large", "MobileNetV3Small",
    "NASNetLarge", "NASNetMobile",
    "ResNet101", "ResNet101V2", "ResNet152", "ResNet152V2", "ResNet50", "ResNet50V2",
    "VGG16", "VGG19", "Xception",
)

# Smallest height and width each architecture accepts with weights=None (keras.applications'
# own min_size, imagenet_utils.obtain_input_shape); 32 for the others.
_MIN_SIZE: Dict[str, int] = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71}


def min_size(architecture: str) -> int:
    return _MIN_SIZE.get(architecture, 32)
