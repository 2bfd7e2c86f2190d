"""The environment that produced the site's numbers."""

from scripts import common

DEPENDS = []  # nothing from mha_ref


def compute():
    return common.runtime_info()
