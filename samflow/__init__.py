"""samflow: simulate the implicit bias of Sharpness-Aware Minimization in JAX.

Where things live:

- :mod:`samflow.model`: the L-layer linear diagonal network, loss, explicit gradient.
- :mod:`samflow.steps`: GD / l2-SAM / linf-SAM / USAM as one step with a perturbation rule.
- :mod:`samflow.init`: initialisations (uniform alpha, per coordinate, given, random).
- :mod:`samflow.discrete`: discrete runs (``lax.scan``) with recording schedules.
- :mod:`samflow.flows`: rescaled continuous-time flows with diffrax.
- :mod:`samflow.theory`: closed forms of THEORY section 4.
- :mod:`samflow.regimes`: regime classification (THEORY section 6).
- :mod:`samflow.cli`: the ``samflow`` command line.

Float64 is the default precision, enabled per call (see :mod:`samflow.precision`),
never globally on import.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("samflow")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"
