import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

MU = np.array([1.0, 2.0, 3.0, 4.0])


@pytest.fixture
def mu():
    return MU.copy()
