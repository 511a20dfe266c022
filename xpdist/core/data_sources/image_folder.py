"""dataset=image_folder: class subfolders of images, counted and checked without TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List

from xpdist.core import datafiles
from xpdist.core.data_sources import DataSourceSpec, FileDataset
from xpdist.core.errors import ConfigError

@dataclass
class ImageFolderDataset(FileDataset):
    name: str = "image_folder"
    # A directory with one subfolder of JPEG, PNG, BMP or GIF images per class (relative to the launch
    # directory); classes are the subfolder names in alphabetical order.
    path: str = ""
    # Images are resized to height x width.
    image_size: List[int] = field(default_factory=lambda: [64, 64])
    validation_split: float = 0.2


class ImageFolder(DataSourceSpec):
    name = "image_folder"
    config = ImageFolderDataset
    images = True
    honours = ("validation_split", "shuffle_buffer", "prefetch", "cache", "drop_remainder", "auto_shard_policy")
    source_type = "local"

    def _files(self, cfg, launch_dir: Path):
        return datafiles.image_files(datafiles.resolve_path(cfg.dataset.path, launch_dir))

    def split_sizes(self, cfg, launch_dir: Path, global_batch: int):
        _, files = self._files(cfg, launch_dir)
        n_val = int(float(cfg.dataset.validation_split) * len(files))  # as image_dataset_from_directory splits
        return len(files) - n_val, n_val

    def preflight(self, cfg, launch_dir: Path) -> None:
        super().preflight(cfg, launch_dir)
        if not cfg.dataset.path:
            raise ConfigError("dataset.path", '""', "dataset=image_folder needs a folder",
                              "Set dataset.path=/path/to/folder with one subfolder per class.")
        self._files(cfg, launch_dir)

    def input_shape(self, cfg, launch_dir: Path):
        return (*(int(d) for d in cfg.dataset.image_size), 3)

    def record(self, cfg, launch_dir: Path):
        path = datafiles.resolve_path(cfg.dataset.path, launch_dir)
        source = (str(path), datafiles.digest(self._files(cfg, launch_dir)[1]))
        return {"train": source, "validation": source}

    def schema(self, cfg) -> dict:
        return {"image": list(cfg.dataset.image_size) + [3], "label": "int"}


SPEC = ImageFolder()
