"""Builds tiny_cuda_ext/_kernels.so with nvcc for the archs TORCH_CUDA_ARCH_LIST names, read the way
torch's extension builder reads it ("8.0;9.0a", "9.0+PTX"), so that what the image holds can be
compared with what the stack declared. Without TORCH_CUDA_ARCH_LIST it does what many real builds do
and compiles for nvcc's default arch, silently. Needs $CUDA_HOME/bin/nvcc; no torch, no GPU."""

import os
import re
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py


def gencode(arch_list):
    flags = []
    for entry in re.split(r"[;\s]+", arch_list.strip()):
        m = re.match(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$", entry)
        if not m:
            raise SystemExit("tiny-cuda-ext: %r is not an arch of TORCH_CUDA_ARCH_LIST" % entry)
        arch = m.group(1) + m.group(2) + m.group(3)
        codes = ["sm_" + arch] + (["compute_" + arch] if m.group(4) else [])
        flags += ["-gencode", "arch=compute_%s,code=[%s]" % (arch, ",".join(codes))]
    return flags


class BuildWithKernels(build_py):
    def run(self):
        super().run()
        nvcc = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
        arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")
        out = os.path.join(self.build_lib, "tiny_cuda_ext", "_kernels.so")
        argv = [nvcc, "-shared", "-Xcompiler", "-fPIC", *(gencode(arch_list) if arch_list else []), "kernel.cu",
                "-o", out]
        print(" ".join(argv), flush=True)
        subprocess.run(argv, check=True)


setup(name="tiny-cuda-ext", version="1.0", packages=["tiny_cuda_ext"], cmdclass={"build_py": BuildWithKernels})
