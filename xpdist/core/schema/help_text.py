"""The option lists of `python -m xpdist --help`, read from the registries at the time of asking.

conf/hydra/help/xpdist.yaml writes `${xpdist.options:groups}` and `${xpdist.options:callbacks}`
where the lists go; the resolver registered here (schema.register_configs) renders them from
schema.OPTIONS, so an option (xpdist's or a user package's) is listed as soon as it is
registered, with the option the composed config chose first: the default, unless the command
line chose another. What each group is for is said once, in GROUP_HELP.
"""

from __future__ import annotations

import functools
import textwrap
from typing import Dict, Iterable, List, Mapping

from omegaconf import OmegaConf

RESOLVER = "xpdist.options"
WIDTH = 100
# The group's name is padded to this column; an option list that wraps continues there.
INDENT = 17

# What each group is for, after its options on --help.
GROUP_HELP: Dict[str, str] = {
    "strategy": "the tf.distribute strategy",
    "cross_ops": "how mirrored reduces gradients",
    "communication": "collectives of multi_worker_mirrored",
    "cluster": "where the task processes run (ray: pip install 'xpdist[ray]'; your engine: "
               "cluster._target_=pkg.module.Engine)",
    "model": "the Keras model (keras_app: model.architecture=ResNet50, ...; custom: model._target_=pkg.module.fn)",
    "dataset": "the training data (custom: dataset._target_=pkg.module.fn; plugin: "
               "dataset._target_=pkg.module.YourSource)",
    "optimizer": "the Keras optimizer",
    "trainer": "Keras Model.fit or a custom training loop (trainer.metrics=[auc,...])",
    "loss": "the loss (auto: from the data)",
    "schedule": "the learning rate over training (schedule.warmup_epochs=N)",
}


def register_resolver(groups: Mapping[str, Mapping[str, type]], multi_groups: Mapping[str, Mapping[str, type]]) -> None:
    """Registers the resolver the help template calls (once per process).

    Args:
        groups: schema.OPTIONS, the options of each group, read when --help renders.
        multi_groups: schema.MULTI_GROUPS.
    """
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, functools.partial(_render, groups, multi_groups), use_cache=False)


def _render(groups, multi_groups, part: str, _root_=None) -> str:
    if part in multi_groups:
        return "\n".join(_lines(part, list(multi_groups[part]), ""))
    lines: List[str] = []
    for group, options in groups.items():
        chosen = _chosen(_root_, group)
        names = ([chosen] if chosen in options else []) + [name for name in options if name != chosen]
        lines += _lines(group, names, GROUP_HELP.get(group, ""))
    return "\n".join(lines)


def _chosen(root, group: str):
    try:
        return root[group]["name"]
    except Exception:  # no composed config (a template rendered alone): no option first
        return None


def _lines(group: str, names: Iterable[str], what: str) -> List[str]:
    text = ", ".join(names) + (f": {what}" if what else "")
    return textwrap.wrap(text, width=WIDTH, initial_indent=f"  {group}".ljust(INDENT),
                         subsequent_indent=" " * INDENT, break_long_words=False, break_on_hyphens=False)
