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
