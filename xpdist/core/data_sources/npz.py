"""dataset=npz: arrays `x` and `y` of the user's .npz file, loaded whole by the task."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import zipfile

from xpdist.core import datafiles
from xpdist.core.data_sources import InMemoryDataset, InMemorySpec
from xpdist.core.errors import ConfigError

SAVE = "Save it with numpy.savez(path, x=..., y=...)."


@dataclass
class NpzDataset(InMemoryDataset):
    name: str = "npz"
    # Path of a .npz file holding arrays `x` and `y` (relative to the launch directory).
    path: str = ""


class Npz(InMemorySpec):
    name = "npz"
    config = NpzDataset
    images = True
    source_type = "local"

    def size(self, cfg, launch_dir: Path) -> int:
        import numpy as np  # numpy reads the array's header only: the data stays on disk

        with np.load(datafiles.resolve_path(cfg.dataset.path, launch_dir)) as arrays:
            return int(arrays["x"].shape[0])

    def input_shape(self, cfg, launch_dir: Path):
        import numpy as np

        with np.load(datafiles.resolve_path(cfg.dataset.path, launch_dir)) as arrays:
            return tuple(arrays["x"].shape[1:])

    def preflight(self, cfg, launch_dir: Path) -> None:
        super().preflight(cfg, launch_dir)
        if not cfg.dataset.path:
            raise ConfigError("dataset.path", '""', "dataset=npz needs a file", "Set dataset.path=/path/to/data.npz.")
        path = datafiles.resolve_path(cfg.dataset.path, launch_dir)
        if not path.is_file():
            raise ConfigError("dataset.path", cfg.dataset.path, f"no such file ({path})",
                              "Point it at an existing .npz file.")
        import numpy as np

        try:
            with np.load(path) as arrays:
                missing = [k for k in ("x", "y") if k not in arrays.files]
                lengths = None if missing else (len(arrays["x"]), len(arrays["y"]))
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:  # empty, cut short, not a zip
            raise ConfigError("dataset.path", cfg.dataset.path,
                              f"not a readable .npz file ({err or type(err).__name__})", SAVE) from None
        if missing:
            raise ConfigError("dataset.path", cfg.dataset.path, f"the file has no array(s) {missing}", SAVE)
        if lengths[0] != lengths[1]:
            raise ConfigError("dataset.path", cfg.dataset.path, f"x has {lengths[0]} examples but y has {lengths[1]}",
                              "Save one label per example: numpy.savez(path, x=x, y=y) with len(x) == len(y).")

    def record(self, cfg, launch_dir: Path):
        path = datafiles.resolve_path(cfg.dataset.path, launch_dir)
        source = (str(path), datafiles.digest([path]))
        return {"train": source, "validation": source}


SPEC = Npz()
