"""A tiny CUDA extension: a shared object with one kernel, loaded with ctypes. Loading needs no GPU
(the CUDA runtime is linked statically and looks for a driver only when a kernel is launched)."""

import ctypes
import os

LIBRARY = os.path.join(os.path.dirname(__file__), "_kernels.so")
lib = ctypes.CDLL(LIBRARY)
