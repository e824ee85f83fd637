import gc
import sys
from pathlib import Path

# Imported here, as each pytest-xdist worker starts: hypothesis's pytest plugin imports
# hypothesis in its terminal summary, after the worker has told the controller it is
# done. In a worker that ran no hypothesis test that import (assertion-rewritten, being
# a plugin's package) took 5-10 s on a loaded machine; execnet sends a worker that is
# still busy 5 s after shutdown a SIGINT, which landed in JAX's gc callback: make test
# ended with a PytestUnraisableExceptionWarning (KeyboardInterrupt in a gc callback).
import hypothesis  # noqa: F401
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

MU = np.array([1.0, 2.0, 3.0, 4.0])


@pytest.fixture
def mu():
    return MU.copy()


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Each test file starts with no compiled program of the files before it.

    Every program JAX keeps holds memory mappings for its kernels (about 700 for a
    flow program), and a process that reaches ``vm.max_map_count`` crashes at its next
    compile. The library releases its programs half way to that cap
    (:mod:`samflow.mappings`, tested in ``tests/test_mappings.py``); here they go at
    each file's end, so that no test meets a release in the middle (a test that counts
    compiles would see them) and a worker's mappings never grow with the suite.
    """
    yield
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
        gc.collect()
