"""xpdist's config groups and recipes, shipped inside the package as xpdist.conf.

Hydra finds them through its search path entry pkg://xpdist.conf; nothing imports this.
"""
