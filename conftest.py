"""The order the tests start in (every pytest run here): the longest first.

pytest-xdist (make test: `--dist worksteal`) gives each worker a slice
of the collection and lets a worker that runs out take from the end of
another's. A test of a minute collected late (a second clean
generation, the contributor's loop) would then run alone at the end
while the other worker waits. Moved to the front, it starts at once
and the rest flows around it. Each worker collects in this same order.
"""

# The markers of the tests that take the longest, longest first.
FIRST = ("build", "slow")


def pytest_collection_modifyitems(items):
    def rank(item):
        names = {m.name for m in item.iter_markers()}
        return next(
            (n for n, mark in enumerate(FIRST) if mark in names), len(FIRST)
        )

    items.sort(key=rank)  # stable: each group keeps its own order
