"""Builds the C++ extension with CMake against the installed torch.

Install with `pip install --no-build-isolation -e .`: an isolated build would
download a second (CUDA) torch. The CMake build directory (./build, or
TORCH_TPU_BUILD_DIR) is kept between builds, so rebuilding is incremental.
"""

import os
import shutil
import subprocess
import sysconfig
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
# The build imports torch, which would import an installed torch_tpu (its
# `torch.backends` entry point) and so need the very library being built.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        import torch

        build_dir = os.environ.get("TORCH_TPU_BUILD_DIR", os.path.join(ROOT, "build"))
        os.makedirs(build_dir, exist_ok=True)
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(
                ["cmake", ROOT, *generator, "-DCMAKE_BUILD_TYPE=Release",
                 f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
                 f"-DPython3_EXECUTABLE={sys.executable}"],
                cwd=build_dir,
            )
        jobs = os.environ.get("TORCH_TPU_BUILD_JOBS", str(os.cpu_count() or 2))
        target, built = BUILT[ext.name]
        subprocess.check_call(["cmake", "--build", build_dir, "--target", target, "-j", jobs])
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        # Replace the file (never write into one a running process has mapped).
        tmp = dest + ".tmp"
        shutil.copy2(os.path.join(build_dir, built), tmp)
        os.replace(tmp, dest)


# Extension module -> (CMake target, the file it builds in the build directory).
BUILT = {
    "torch_tpu.lib.libtorch_tpu": ("torch_tpu", "libtorch_tpu.so"),
    "torch_tpu._C_distributed": (
        "torch_tpu_distributed",
        "_C_distributed" + sysconfig.get_config_var("EXT_SUFFIX"),
    ),
}


setup(
    ext_modules=[Extension(name, sources=[]) for name in BUILT],
    cmdclass={"build_ext": CMakeBuild},
)
