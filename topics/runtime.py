"""The environment that produced the site's numbers."""

import platform

DEPENDS = []  # nothing from mha_ref


def compute():
    """Versions and device that produced the numbers."""
    import numpy as np
    import torch

    cuda = torch.cuda.is_available()
    return {
        "numpy": np.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "cuda_available": cuda,
        "platform": f"{platform.system()} {platform.machine()}",
    }
