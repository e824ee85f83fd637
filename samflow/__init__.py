"""samflow: simulate the implicit bias of Sharpness-Aware Minimization in JAX.

The public API (``docs/api.md``)::

    import samflow
    ds = samflow.sweep("sam-l2", depth=2, mu=[1, 2, 3, 4], rho=1.0,
                       axes={"alpha": "0.05:5:64:log"}, runner=samflow.Flow(tau_max=200))

Where things live:

- :mod:`samflow.rules`: GD / l2-SAM / linf-SAM / USAM as perturbation rules (and yours).
- :mod:`samflow.steps`: one step over any pytree; :mod:`samflow.transform`: SAM around
  an optax optimiser; :mod:`samflow.fit`: the discrete runner for any model and loss.
- :mod:`samflow.model`: the L-layer linear diagonal network, loss, explicit gradient.
- :mod:`samflow.runners`: :class:`Discrete` and :class:`Flow`, every default once.
- :mod:`samflow.discrete`, :mod:`samflow.flows`: the discrete run and the diffrax flow.
- :mod:`samflow.engine`: the point runner every path goes through.
- :mod:`samflow.sweeps`: axes, the sweep spec, the resumable store.
- :mod:`samflow.schema`: every variable and attribute of every file samflow writes.
- :mod:`samflow.regimes`: regime classification (docs/theory.md §6).
- :mod:`samflow.theory`: closed forms (docs/theory.md §4).
- :mod:`samflow.plotting`, :mod:`samflow.figures`: figures; :mod:`samflow.images`: CNNs.
- :mod:`samflow.cli`: the ``samflow`` command line.

Float64 is the default precision, enabled per call (see :mod:`samflow.precision`),
never globally on import.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("samflow")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

from samflow.api import sweep, trajectory
from samflow.boundary import boundary
from samflow.errors import InputError
from samflow.fit import FitResult, fit
from samflow.regimes import FLAG_MEANINGS, FLAG_VALUES
from samflow.rules import (
    GD,
    METHODS,
    SAM_L2,
    SAM_LINF,
    USAM,
    PerturbationRule,
    get_rule,
)
from samflow.runners import Discrete, Flow
from samflow.transform import sam

__all__ = [
    "FLAG_MEANINGS",
    "FLAG_VALUES",
    "GD",
    "METHODS",
    "SAM_L2",
    "SAM_LINF",
    "USAM",
    "Discrete",
    "FitResult",
    "Flow",
    "InputError",
    "PerturbationRule",
    "__version__",
    "boundary",
    "fit",
    "get_rule",
    "sam",
    "sweep",
    "trajectory",
]
