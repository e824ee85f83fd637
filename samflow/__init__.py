"""samflow: simulate the implicit bias of Sharpness-Aware Minimization in JAX.

The public API (``docs/api.md``)::

    import samflow
    ds = samflow.sweep("sam-l2", depth=2, mu=[1, 2, 3, 4], rho=1.0,
                       axes={"alpha": "0.05:5:64:log"}, runner=samflow.Flow(tau_max=200))

Where things live:

- :mod:`samflow.rules`: GD / l2-SAM / linf-SAM / USAM as perturbation rules (and yours).
- :mod:`samflow.steps`: one step over any pytree; :mod:`samflow.transform`: SAM around
  an optax optimiser; :func:`samflow.fit`: the discrete runner for any model and loss.
- :mod:`samflow.model`: the diagonal network and its loss, explicit gradient and Hessian
  (:class:`Model`); :mod:`samflow.parametrizations` (product, u2-v2, uv, and yours) and
  :mod:`samflow.losses` (logistic, exponential, squared, and yours).
- :mod:`samflow.runners`: :class:`Discrete` and :class:`Flow` and their save schedules
  (:class:`Every`, :class:`LogSpaced`, :class:`At`); :mod:`samflow.classification`
  (:class:`Classification`), :mod:`samflow.summaries` (:class:`Summaries`) and
  :class:`BoundarySearch`: the settings objects, each holding its defaults.
- :mod:`samflow.discrete`, :mod:`samflow.flows`: the discrete run and the diffrax flow.
- :mod:`samflow.engine`: the point runner every path goes through.
- :mod:`samflow.sweeps`: axes, the sweep spec, the resumable store.
- :mod:`samflow.schema`: every variable and attribute of every file samflow writes.
- :mod:`samflow.regimes`: regime classification (docs/theory/regimes.md#definitions).
- :mod:`samflow.theory`: closed forms (docs/theory/balanced.md#balanced-initialisation).
- :mod:`samflow.plotting`, :mod:`samflow.figures`: figures; :mod:`samflow.images`: CNNs.
- :mod:`samflow.cli`: the ``samflow`` command line.

Float64 is the default precision, enabled per call (see :mod:`samflow.precision`),
never globally on import. What importing samflow does set, before JAX starts: XLA's CPU
compiler runs each small loop as one compiled function (:mod:`samflow.xla_options`; the
same numbers, faster; ``SAMFLOW_XLA_LOOPS=default`` leaves ``XLA_FLAGS`` alone).
"""

from importlib import import_module

from samflow.errors import InputError
from samflow.xla_options import compile_whole_loops

compile_whole_loops()

# Where each public name lives. They load on first use (PEP 562), so that importing
# samflow (and the command line's --help and its input errors) does not import JAX, nor
# importlib.metadata for the version (tests/test_start_up.py).
_WHERE = {
    "FLAG_MEANINGS": "samflow.regimes",
    "FLAG_VALUES": "samflow.regimes",
    "GD": "samflow.rules",
    "METHODS": "samflow.rules",
    "SAM_L2": "samflow.rules",
    "SAM_LINF": "samflow.rules",
    "USAM": "samflow.rules",
    "BoundarySearch": "samflow._boundary",
    "Classification": "samflow.classification",
    "At": "samflow.runners",
    "Discrete": "samflow.runners",
    "Every": "samflow.runners",
    "LogSpaced": "samflow.runners",
    "FitResult": "samflow._fit",
    "Loss": "samflow.losses",
    "MarginLoss": "samflow.losses",
    "Model": "samflow.model",
    "Parametrization": "samflow.parametrizations",
    "Flow": "samflow.runners",
    "PerturbationRule": "samflow.rules",
    "Summaries": "samflow.summaries",
    "SweepSpec": "samflow.sweeps.spec",
    "boundary": "samflow._boundary",
    "fit": "samflow._fit",
    "get_rule": "samflow.rules",
    "sam": "samflow.transform",
    "sweep": "samflow.api",
    "trajectory": "samflow.api",
    "__version__": "samflow.version",
}

__all__ = ["InputError", *_WHERE]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'samflow' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
