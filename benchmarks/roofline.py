"""The roofline: ``roofline.c`` compiled here with gcc -O3 -march=native -ffast-math -fopenmp
(float32 at d = 4 takes its AVX-512 kernel where the CPU has AVX-512)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).with_name("roofline.c")


def build(dtype) -> ctypes.CDLL | None:
    """Compile the kernel for ``dtype`` (float32/float64); None when gcc is missing."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    out = Path(tempfile.mkdtemp(prefix="samflow-roofline-")) / f"roofline_{np.dtype(dtype)}.so"
    real = ["-DREAL=double", "-DREAL_IS_DOUBLE=1"] if np.dtype(dtype) == np.float64 else []
    cmd = [gcc, "-O3", "-march=native", "-ffast-math", "-fopenmp", "-shared", "-fPIC"]
    subprocess.run([*cmd, *real, "-o", str(out), str(SOURCE), "-lm"], check=True)
    lib = ctypes.CDLL(str(out))
    lib.run.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long] + [ctypes.c_void_p] * 5
    return lib


def runner(lib: ctypes.CDLL, inputs: dict, eta: float, steps: int):
    """``() -> (u [d, B], tau [B])``: one full run of the kernel on the bench grid."""
    alpha, rho, mu = inputs["alpha"], inputs["rho"], inputs["mu"]
    dtype, B, d = alpha.dtype, len(alpha), len(mu)
    eta_b = np.full(B, eta, dtype)

    def ptr(a):
        return a.ctypes.data_as(ctypes.c_void_p)

    def run():
        u = np.ascontiguousarray(np.broadcast_to(alpha, (d, B)))
        tau = np.zeros(B, dtype)
        lib.run(d, B, steps, ptr(mu), ptr(rho), ptr(eta_b), ptr(u), ptr(tau))
        return u, tau

    return run


def threads() -> int:
    return int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
