"""A loss and a parametrisation of your own, run through every entry point.

samflow's model is a parametrisation (how the predictor ``beta`` is made from the
parameters ``theta``) and a loss of the prediction, each a small frozen object with a
documented protocol (docs/theory/models.md#parametrisations-and-losses):
:class:`samflow.Parametrization` says ``beta``, its Jacobian ``G[l, j] = d beta_j / d theta[l, j]``
and its curvature ``B[l, k, j]``; :class:`samflow.Loss` says ``l(p, y)`` and its first two
derivatives in ``p``. Nothing else is needed: gradients, the Hessian, flows and sweeps follow.

Here (neither is built in):

- ``SignedPower``: a deep signed network ``beta = u^L - v^L`` (two rows u, v; ``L``
  a field), the depth-L analogue of ``u^2 - v^2``;
- ``Huber``: the Huber loss of the residual ``r = p - y``, quadratic for ``|r| <=
  delta`` and linear beyond (any real labels, so not a margin loss: plain time).

The script runs one discrete SAM trajectory, one flow, a sweep over ``alpha`` and
:func:`samflow.fit` on the model's loss, and prints what each ends with.
``tests/test_custom_model.py`` checks the same objects against NumPy.

Run: python examples/custom_model.py   (about a minute on 2 CPU cores)
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from jax import Array

import samflow


@dataclass(frozen=True)
class SignedPower(samflow.Parametrization):
    """``beta = u^L - v^L`` (rows u, v): ``G = (L u^(L-1), -L v^(L-1))``, ``B =
    diag(L (L-1) u^(L-2), -L (L-1) v^(L-2))``."""

    power: int = 3
    name: str = "signed-power"
    rows: int | None = 2

    def __post_init__(self) -> None:
        if not isinstance(self.power, int) or self.power < 2:
            raise samflow.InputError(f"SignedPower: power must be an int >= 2, got {self.power!r}")

    def beta(self, theta: Array) -> Array:
        return theta[0] ** self.power - theta[1] ** self.power

    def jacobian(self, theta: Array) -> Array:
        L = self.power
        return jnp.stack([L * theta[0] ** (L - 1), -L * theta[1] ** (L - 1)])

    def curvature(self, theta: Array) -> Array:
        L = self.power
        zero = jnp.zeros_like(theta[0])
        uu = L * (L - 1) * theta[0] ** (L - 2)
        vv = -L * (L - 1) * theta[1] ** (L - 2)
        return jnp.stack([jnp.stack([uu, zero]), jnp.stack([zero, vv])])

    def underflow(self, theta0: Array) -> Array:
        # beta = 0 at u = v is no underflow; a nonzero u whose power is 0 is.
        u, v = theta0[0], theta0[1]
        L = self.power
        return ((u != 0) & (u**L == 0)) | ((v != 0) & (v**L == 0))


@dataclass(frozen=True)
class Huber(samflow.Loss):
    """``l = r^2 / 2`` for ``|r| <= delta``, else ``delta (|r| - delta / 2)``, ``r = p -
    y``: ``l' = clip(r, -delta, delta)``, ``l'' = [|r| <= delta]``."""

    delta: float = 0.5
    name: str = "huber"

    def __post_init__(self) -> None:
        if not self.delta > 0:
            raise samflow.InputError(f"Huber: delta must be > 0, got {self.delta!r}")

    def derivatives(self, p: Array, y: Array) -> tuple[Array, Array, Array]:
        r = p - y
        inside = jnp.abs(r) <= self.delta
        value = jnp.where(inside, 0.5 * r * r, self.delta * (jnp.abs(r) - 0.5 * self.delta))
        return value, jnp.clip(r, -self.delta, self.delta), inside.astype(r.dtype)


MODEL = samflow.Model(SignedPower(power=3), Huber(delta=0.5))
X = np.array([[1.0, 0.5, -0.3], [0.2, -1.0, 0.4], [-0.6, 0.3, 1.0], [0.5, 0.5, 0.5]])
Y = np.array([1.5, -0.5, 2.0, 0.7])
KW = dict(depth=2, data=(X, Y), parametrization=MODEL.parametrization, loss=MODEL.loss)


def main() -> None:
    discrete = samflow.trajectory(
        "sam-l2", alpha=0.5, rho=0.05, runner=samflow.Discrete(eta=0.05, steps=400), **KW
    )
    print(f"discrete l2-SAM: loss {float(discrete['loss'][-1]):.4g}, "
          f"beta {np.round(discrete['beta'][-1].values, 3).tolist()}")  # fmt: skip
    # The l2-SAM flow is solved up to near the minimum: there ``g / ||g||`` turns at
    # every step and an adaptive solver stalls (the discrete run above hovers instead).
    flow = samflow.trajectory(
        "sam-l2", alpha=0.5, rho=0.05, runner=samflow.Flow(12.0, samflow.LogSpaced(39)), **KW
    )
    print(f"l2-SAM flow to t = 12: loss {float(flow['loss'][-1]):.4g}")
    grid = samflow.sweep(
        "gd",
        axes={"alpha": "0.05:1:6:log"},
        runner=samflow.Discrete(eta=0.05, steps=400, save=samflow.Every(40)),
        **KW,
    )
    final = grid["loss"].isel(time=-1).values
    print(f"gd sweep, final loss by alpha: {np.round(final, 4).tolist()}")
    theta0 = np.full((2, 3), 0.5)
    fitted = samflow.fit(
        MODEL.loss_fn(X, Y),
        theta0,
        "sam-l2",
        rho=0.05,
        runner=samflow.Discrete(eta=0.05, steps=400),
    )
    print(f"fit (l2-SAM on the model's loss): loss {float(fitted.loss[-1]):.4g}")


if __name__ == "__main__":
    main()
