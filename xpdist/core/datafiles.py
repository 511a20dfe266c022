"""The files of the file data sets (tfrecord, image_folder, npz), found and counted without TensorFlow.

The driver needs the number of examples before any task starts (steps per epoch, batch
checks, params), and it checks globs and folders before a run is created. TFRecord files
are counted by walking their length-prefixed records: the format is public
(tensorflow/core/lib/io/record_writer.cc: uint64 length, uint32 crc, data, uint32 crc),
and walking it reads no payload of an uncompressed file.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import os
import struct
import zlib
from pathlib import Path
from typing import IO, List, Tuple

from xpdist.core.errors import ConfigError

# The extensions keras.utils.image_dataset_from_directory reads.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
# First bytes of each image format: a file with an image extension but other bytes is no image.
_MAGIC = (b"\xff\xd8\xff", b"\x89PNG", b"BM", b"GIF8")


def _resolve(path: str, launch_dir: Path) -> str:
    p = os.path.expanduser(path)
    return p if os.path.isabs(p) else str(Path(launch_dir) / p)


def match_files(globs, key: str, launch_dir: Path) -> List[Path]:
    """Every file the globs match, sorted; ConfigError naming `key` when one glob matches none."""
    if not globs:
        raise ConfigError(key, "[]", "no files given", f"Set {key}=[path/to/*.tfrecord].")
    found: List[Path] = []
    for pattern in globs:
        hits = sorted(p for p in glob.glob(_resolve(pattern, launch_dir), recursive=True) if os.path.isfile(p))
        if not hits:
            raise ConfigError(key, pattern, "no file matches this glob", "Point it at existing TFRecord files.")
        found.extend(Path(p) for p in hits)
    return sorted(set(found))


def _open(path: Path, compression: str) -> IO[bytes]:
    if compression == "GZIP":
        return gzip.open(path, "rb")
    if compression == "ZLIB":
        import io

        return io.BytesIO(zlib.decompress(path.read_bytes()))
    return open(path, "rb")


def count_records(path: Path, compression: str, key: str) -> int:
    """Records in one TFRecord file; ConfigError naming the file when it is cut short or not one."""
    count = 0
    try:
        with _open(path, compression) as stream:
            while True:
                header = stream.read(12)
                if not header:
                    return count
                if len(header) < 12:
                    raise ValueError("truncated record header")
                (length,) = struct.unpack("<Q", header[:8])
                stream.seek(length + 4, os.SEEK_CUR)
                if compression == "none" and stream.tell() > os.fstat(stream.fileno()).st_size:
                    raise ValueError("truncated record")
                count += 1
    except (OSError, ValueError, EOFError, zlib.error) as err:
        raise ConfigError(key, str(path), f"not a readable TFRecord file with compression={compression} ({err})",
                          "Check the file, or set dataset.compression to how it was written.") from None


def image_files(root: Path, key: str = "dataset.path") -> Tuple[List[str], List[Path]]:
    """The class names and image files of an image folder; ConfigError on what Keras would refuse."""
    if not root.is_dir():
        raise ConfigError(key, str(root), "no such directory", "Point it at a folder with one subfolder per class.")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    if not classes:
        raise ConfigError(key, str(root), "the folder has no class subfolder",
                          "Put the images of each class in a subfolder named after the class.")
    files: List[Path] = []
    for name in classes:
        for path in sorted((root / name).rglob("*")):
            if path.is_file() and path.suffix.lower() in IMAGE_EXTENSIONS:
                with open(path, "rb") as f:
                    head = f.read(8)
                if not head.startswith(_MAGIC):
                    raise ConfigError(key, str(root), f"{path} is not a JPEG, PNG, BMP or GIF image",
                                      "Remove or replace the file.")
                files.append(path)
    if not files:
        raise ConfigError(key, str(root), f"no image in the class subfolders {classes}",
                          f"Add {', '.join(IMAGE_EXTENSIONS)} files.")
    return classes, files


def digest(paths: List[Path]) -> str:
    """A short hash of file names, sizes and modification times: it changes when the data does."""
    h = hashlib.sha256()
    for p in paths:
        st = p.stat()
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def resolve_path(path: str, launch_dir: Path) -> Path:
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else launch_dir / p
