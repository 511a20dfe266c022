"""Optuna's own plots of a study (optuna.visualization.matplotlib), as PNG files."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable, List, Tuple

# File name -> what the plot shows; the order they are drawn in.
PLOTS = ("optimization_history", "param_importances", "parallel_coordinate")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # headless: CI and SSH sessions have no display
    import matplotlib.pyplot as plt

    return plt


def write_all(study, out_dir: Path) -> Tuple[List[Path], List[str]]:
    """Draws each plot that the study's trials allow into out_dir/<name>.png.

    Returns:
        The files written, and one note for each plot that could not be drawn and why
        (parameter importance needs two complete trials, for instance).
    """
    from optuna.trial import TrialState
    from optuna.visualization import matplotlib as optuna_plots

    plt = _pyplot()
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    varied = {k for t in complete for k in t.params if len({str(u.params.get(k)) for u in complete}) > 1}
    needs: dict = {
        "optimization_history": (optuna_plots.plot_optimization_history, len(complete) >= 1,
                                 "no trial completed"),
        "param_importances": (optuna_plots.plot_param_importances, len(complete) >= 2 and bool(varied),
                              "parameter importance needs 2 complete trials with different values"),
        "parallel_coordinate": (optuna_plots.plot_parallel_coordinate, len(complete) >= 1,
                                "no trial completed"),
    }
    files, notes = [], []
    for name in PLOTS:
        draw, possible, why = needs[name]
        if not possible:
            notes.append(f"{name}: {why}")
            continue
        try:
            files.append(_draw(draw, study, out_dir / f"{name}.png", plt))
        except (ValueError, RuntimeError, ZeroDivisionError) as err:  # e.g. one distinct value per parameter
            notes.append(f"{name}: {err}")
    return files, notes


def _draw(draw: Callable, study, path: Path, plt) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna.visualization.matplotlib is marked experimental
        axes = draw(study)
    figure = (axes.flat[0] if hasattr(axes, "flat") else axes).get_figure()
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path
