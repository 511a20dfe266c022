"""Writes data/blobs.npz: 600 points in 4 dimensions around 3 centres, labelled by centre.

Stands in for the project's own data: xpdist's dataset=npz reads arrays `x` and `y`.
"""

from pathlib import Path

import numpy as np


def main() -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=3.0, size=(3, 4))
    y = rng.integers(0, 3, size=600).astype("int32")
    x = (centres[y] + rng.normal(size=(600, 4))).astype("float32")
    out = Path(__file__).resolve().parent / "data" / "blobs.npz"
    out.parent.mkdir(exist_ok=True)
    np.savez(out, x=x, y=y)
    print(out)


if __name__ == "__main__":
    main()
