"""A user's faulty parametrisation or loss (examples/custom_model.py's ``SignedPower`` and
``Huber`` with one method replaced) is refused before the run compiles, by an
``InputError`` of one line that names the class and the method and says what the
protocol wants (samflow.user_code); a NaN that a user's method makes at run time fails
the run, in a flow as in a discrete run."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import samflow
from samflow.regimes import NAMES

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_model.py"
if "custom_model" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("custom_model", EXAMPLE)
    sys.modules["custom_model"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["custom_model"])
custom = sys.modules["custom_model"]
SignedPower, Huber, X, Y = custom.SignedPower, custom.Huber, custom.X, custom.Y
FAILED = next(code for code, name in NAMES.items() if name == "failed")


def faulty_parametrization(**methods) -> samflow.Parametrization:
    """``SignedPower`` with ``methods`` replaced, as a frozen dataclass named Faulty."""
    return dataclass(frozen=True)(type("Faulty", (SignedPower,), methods))()


def faulty_loss(**methods) -> samflow.Loss:
    """``Huber`` with ``methods`` replaced, as a frozen dataclass named FaultyHuber."""
    return dataclass(frozen=True)(type("FaultyHuber", (Huber,), methods))()


def run(parametrization=None, loss=None, runner=None):
    """The issue's base call: l2-SAM on the example's data, 40 discrete steps."""
    return samflow.trajectory(
        "sam-l2",
        depth=2,
        data=(X, Y),
        alpha=0.5,
        rho=0.05,
        runner=runner or samflow.Discrete(eta=0.05, steps=40),
        parametrization=parametrization or SignedPower(),
        loss=loss or Huber(),
    )


beta, jacobian, curvature = SignedPower.beta, SignedPower.jacobian, SignedPower.curvature
huber = Huber.derivatives

# Each case of the issue: the mistake, and what the message must say. The probe is
# theta [2, 3, 5] (rows 2, d 3, a batch of 5), n = 4 points, float64.
CASES = {
    "beta of the wrong shape": (
        dict(beta=lambda s, t: beta(s, t)[:2]),
        "Faulty.beta returned float64[2, 5] on inputs float64[2, 3, 5]; the protocol wants "
        "one array float64[3, 5]",
    ),
    "beta that does not reduce the rows": (
        dict(beta=lambda s, t: t**3),
        "Faulty.beta returned float64[2, 3, 5] on inputs float64[2, 3, 5]; the protocol wants "
        "one array float64[3, 5]",
    ),
    "beta a scalar": (dict(beta=lambda s, t: jnp.sum(t)), "Faulty.beta returned float64[] "),
    "jacobian transposed": (
        dict(jacobian=lambda s, t: jnp.swapaxes(jacobian(s, t), 0, 1)),
        "Faulty.jacobian returned float64[3, 2, 5] on inputs float64[2, 3, 5]; the protocol "
        "wants one array float64[2, 3, 5]",
    ),
    "beta int32": (
        dict(beta=lambda s, t: beta(s, t).astype(jnp.int32)),
        "Faulty.beta returned int32[3, 5] on inputs float64[2, 3, 5]; the protocol wants one "
        "array float64[3, 5]",
    ),
    "beta complex": (
        dict(beta=lambda s, t: beta(s, t).astype(jnp.complex128)),
        "Faulty.beta returned complex128[3, 5]",
    ),
    "beta calls NumPy": (
        dict(beta=lambda s, t: np.asarray(t)[0] ** 3 - np.asarray(t)[1] ** 3),
        "Faulty.beta converts its traced input to a concrete value (NumPy, float(), if on an "
        "array): use jax.numpy",
    ),
    "beta calls float()": (
        dict(beta=lambda s, t: beta(s, t) * float(t[0, 0])),
        "Faulty.beta converts its traced input to a concrete value",
    ),
    "beta a tuple": (
        dict(beta=lambda s, t: (beta(s, t),)),
        "Faulty.beta returned a tuple of 1 (float64[3, 5])",
    ),
    "beta None": (dict(beta=lambda s, t: None), "Faulty.beta returned None"),
    "jacobian [1, d]": (
        dict(jacobian=lambda s, t: jacobian(s, t)[:1]),
        "Faulty.jacobian returned float64[1, 3, 5]",
    ),
    "curvature of the wrong shape": (
        dict(curvature=lambda s, t: curvature(s, t)[0]),
        "Faulty.curvature returned float64[2, 3, 5] on inputs float64[2, 3, 5]; the protocol "
        "wants one array float64[2, 2, 3, 5]",
    ),
    "derivatives None": (
        dict(derivatives=lambda s, p, y: None),
        "FaultyHuber.derivatives returned None; the protocol wants a tuple of 3 arrays "
        "float64[4, 5]",
    ),
    "derivatives two values": (
        dict(derivatives=lambda s, p, y: huber(s, p, y)[:2]),
        "FaultyHuber.derivatives returned a tuple of 2 (float64[4, 5], float64[4, 5]); the "
        "protocol wants a tuple of 3",
    ),
    "derivatives a scalar": (
        dict(derivatives=lambda s, p, y: jnp.sum(p)),
        "FaultyHuber.derivatives returned float64[]; the protocol wants a tuple of 3",
    ),
    "derivatives a wrong-shaped slope": (
        dict(derivatives=lambda s, p, y: (huber(s, p, y)[0], p[0], huber(s, p, y)[2])),
        "FaultyHuber.derivatives(...)[1] returned float64[5] on inputs float64[4, 5], "
        "float64[4, 5]; the protocol wants one array float64[4, 5]",
    ),
    "derivatives int32": (
        dict(derivatives=lambda s, p, y: tuple(a.astype(jnp.int32) for a in huber(s, p, y))),
        "FaultyHuber.derivatives(...)[0] returned int32[4, 5]",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_faulty_method_is_named_before_the_run(case):
    methods, message = CASES[case]
    where = "loss" if "derivatives" in methods else "parametrization"
    faulty = (faulty_loss if where == "loss" else faulty_parametrization)(**methods)
    with pytest.raises(samflow.InputError) as caught:
        run(**{where: faulty})
    text = str(caught.value)
    assert message in text
    assert "\n" not in text


def test_a_dataclass_that_is_not_frozen_is_told_to_be():
    @dataclass
    class Loose(samflow.Parametrization):
        name: str = "loose"
        rows: int = 2
        power = 3
        beta = SignedPower.beta
        jacobian = SignedPower.jacobian
        curvature = SignedPower.curvature

    with pytest.raises(
        samflow.InputError,
        match=r"parametrization Loose is not hashable \(Loose.__hash__ is None, as "
        r"@dataclass without frozen=True makes it\): make it a frozen dataclass "
        r"\(@dataclass\(frozen=True\)\)",
    ):
        run(parametrization=Loose())
    with pytest.raises(samflow.InputError, match="Loose is not hashable"):
        samflow.Model(Loose(), "squared")


def test_a_margin_loss_is_checked_through_phi():
    @dataclass(frozen=True)
    class TwoValues(samflow.MarginLoss):
        name: str = "two"

        def phi(self, z):
            return jnp.exp(-z), -jnp.exp(-z)

    with pytest.raises(samflow.InputError, match=r"TwoValues.phi returned a tuple of 2 "):
        samflow.trajectory(
            "gd",
            depth=2,
            mu=[1.0, 2.0],
            alpha=0.3,
            loss=TwoValues(),
            runner=samflow.Discrete(eta=0.1, steps=4),
        )


def test_a_float32_run_wants_float32():
    """The dtype wanted is the run's: in a float32 run the probe and the answer are float32."""
    whole = faulty_parametrization(beta=lambda s, t: beta(s, t).astype(jnp.int32))
    with pytest.raises(
        samflow.InputError,
        match=r"Faulty.beta returned int32\[3, 5\] on "
        r"inputs float32\[2, 3, 5\]; the protocol wants one array float32",
    ):
        samflow.trajectory(
            "gd",
            depth=2,
            data=(X, Y),
            alpha=0.5,
            dtype="float32",
            parametrization=whole,
            loss=Huber(),
            runner=samflow.Discrete(eta=0.05, steps=4),
        )


def _nan_loss():
    def derivatives(s, p, y):
        value, slope, curve = huber(s, p, y)
        return value * jnp.nan, slope, curve

    return faulty_loss(derivatives=derivatives)


def test_a_nan_loss_fails_a_discrete_run_at_its_first_record():
    with pytest.warns(RuntimeWarning, match=r"\(failed_step 0\): FaultyHuber.derivatives"):
        ds = run(loss=_nan_loss())
    assert ds.attrs["failed_step"] == 0
    assert not ds["reached"].values.any()


@pytest.mark.parametrize("fault", ["loss", "beta"])
def test_a_nan_fails_a_flow_and_says_where(fault):
    """A user's loss of NaN (the state stays finite, so the solver sees nothing) and a
    beta of NaN: the flow is failed, and stop_tau is the first record that is not finite
    (the start, 0). Before, both ran to the end with solver_failed 0."""
    nan_beta = faulty_parametrization(beta=lambda s, t: beta(s, t) * jnp.nan)
    kw = {"loss": _nan_loss()} if fault == "loss" else {"parametrization": nan_beta}
    maker = "FaultyHuber.derivatives(...)[0]" if fault == "loss" else "Faulty.beta"
    with pytest.warns(RuntimeWarning) as caught:
        ds = run(runner=samflow.Flow(2.0, samflow.LogSpaced(9)), **kw)
    assert ds.attrs["solver_failed"] == 1
    assert ds.attrs["stop_tau"] == 0.0
    said = [str(w.message) for w in caught if "the run failed" in str(w.message)]
    assert said == [f"the run failed (stop_tau 0): {maker} returns nan at its start theta0; "
                    "its value must be finite wherever the run goes "
                    "(docs/theory/models.md#models-of-your-own)"]  # fmt: skip


def test_a_run_that_succeeds_or_fails_by_its_own_numbers_names_no_method(recwarn):
    """No warning where the run does not fail, nor where it fails but every method of the
    user's is finite at its start and last state (a step size too large: the run's own
    numbers overflow, not the user's code)."""
    ok = run()
    assert ok.attrs["failed_step"] == -1
    huge = run(runner=samflow.Discrete(eta=1e3, steps=40))
    assert huge.attrs["failed_step"] >= 0  # the premise: the run fails
    assert not [w for w in recwarn if "the run failed" in str(w.message)]


def test_a_nan_in_a_classified_flow_is_the_regime_failed():
    """On the product network with a margin loss, where regimes are given: a phi whose
    value is NaN after tau = 1 (the state finite) labels the flow failed and stops it at
    the first record past 1."""

    @dataclass(frozen=True)
    class LateNan(samflow.MarginLoss):
        name: str = "late-nan"

        def phi(self, z):
            e = jnp.exp(-z)
            return jnp.where(z > 1.5, jnp.nan, e), -e, e

    ok = samflow.trajectory(
        "gd",
        depth=2,
        mu=[1.0, 2.0],
        alpha=0.3,
        loss="exponential",
        runner=samflow.Flow(4.0, samflow.At((0.0, 1.0, 2.0, 3.0, 4.0))),
    )
    z = ok["beta"].values @ np.array([1.0, 2.0])
    first = int(np.argmax(z > 1.5))
    assert 0 < first  # the premise: the margin passes 1.5 inside the horizon, not at 0
    # The start is finite (z < 1.5): the warning names phi at the last state.
    with pytest.warns(RuntimeWarning, match=r"LateNan.phi\(...\)\[0\] returns nan at its last"):
        ds = samflow.trajectory(
            "gd",
            depth=2,
            mu=[1.0, 2.0],
            alpha=0.3,
            loss=LateNan(),
            runner=samflow.Flow(4.0, samflow.At((0.0, 1.0, 2.0, 3.0, 4.0))),
        )
    assert int(ds["regime"]) == FAILED
    assert ds.attrs["solver_failed"] == 1
    assert ds.attrs["stop_tau"] == float(ok["tau"].values[first])
