# %% [markdown]
# ## The environment that produced the numbers
#
# Every page's notebook runs in the same environment as this one: the
# versions of Python, NumPy and PyTorch, and the device PyTorch would
# use. Floating-point results can differ in the last digits on another
# machine or with other versions; run this cell to see yours.

# %%
import platform

import numpy as np
import torch

import glue

cuda = torch.cuda.is_available()
glue.value("python", platform.python_version())
glue.value("numpy", np.__version__)
glue.value("torch", torch.__version__)
glue.value("device", torch.cuda.get_device_name(0) if cuda else "cpu")
glue.value("cuda_available", cuda)
system = glue.value("platform", f"{platform.system()} {platform.machine()}")
