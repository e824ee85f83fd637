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

from samflow import compile_cache, mappings

sys.path.insert(0, str(Path(__file__).parent))

MU = np.array([1.0, 2.0, 3.0, 4.0])


@pytest.fixture
def mu():
    return MU.copy()


@pytest.fixture(autouse=True, scope="session")
def _compile_cache_from_the_first_program():
    """The compile cache on before a test process compiles its first program, not at the
    library's first run (:func:`samflow.compile_cache.ensure`): the programs that tests
    jit themselves (``tests/runs.py``) are kept as well, so that a later file, or the
    other xdist worker, reads them back instead of compiling them again (about 10 s of CPU
    for a flow program). Both workers share the folder: ``$SAMFLOW_COMPILE_CACHE``, a
    fresh one in CI (``.ci/run``), else the library's default. JAX is imported first, so
    that the setting goes to JAX's configuration and not into the environment of the
    processes that tests start."""
    import jax  # noqa: F401

    compile_cache.ensure()


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """A test file ends with its worker's compiled programs released when they hold more
    than a quarter of the process's cap on memory mappings.

    Every program JAX keeps holds memory mappings for its kernels (about 700 for a
    flow program), and a process that reaches ``vm.max_map_count`` crashes at its next
    compile: a pytest worker that kept every program of the suite did (issue 37). The
    library releases its programs half way to that cap (:mod:`samflow.mappings`, tested
    in ``tests/test_mappings.py``); a release there, between two calls of one test,
    would be seen by a test that counts compiles, so here the programs go between files,
    at a quarter of the cap (one file added at most about 10,000 in a whole run), and a
    file compiles again only what it needs after a release, not after every file.
    """
    yield
    count = mappings.count()
    if count is not None and count > mappings.cap() // 4:
        mappings.release()
