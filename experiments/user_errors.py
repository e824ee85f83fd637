"""Issue 39's table of a user's mistakes, tried as a user would: one line per case, the
case and the first line of what samflow says (an error's first line, a warning, or what
the run's record says where nothing is raised).

Run: PYTHONPATH=. python experiments/user_errors.py   (about a minute on 2 CPU cores)

The model cases are examples/custom_model.py's ``SignedPower`` / ``Huber`` with one
method replaced, in the issue's base call; the last line counts the model cases whose
message names the user's class and method.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import diffrax
import jax.numpy as jnp
import numpy as np

import samflow
from samflow import compile_cache
from samflow.cli import main as cli
from samflow.validity import validity_map

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("custom_model", ROOT / "examples/custom_model.py")
custom = importlib.util.module_from_spec(_spec)
sys.modules["custom_model"] = custom
_spec.loader.exec_module(custom)
SignedPower, Huber, X, Y = custom.SignedPower, custom.Huber, custom.X, custom.Y
beta, jacobian, curvature = SignedPower.beta, SignedPower.jacobian, SignedPower.curvature
huber = Huber.derivatives


def faulty(base, name, **methods):
    return dataclass(frozen=True)(type(name, (base,), methods))()


def P(**m):
    return faulty(SignedPower, "Faulty", **m)


def L(**m):
    return faulty(Huber, "FaultyHuber", **m)


def base_call(parametrization=None, loss=None, runner=None):
    return samflow.trajectory(
        "sam-l2", depth=2, data=(X, Y), alpha=0.5, rho=0.05,
        runner=runner or samflow.Discrete(eta=0.05, steps=40),
        parametrization=parametrization or SignedPower(), loss=loss or Huber(),
    )  # fmt: skip


@dataclass
class Loose(samflow.Parametrization):
    name: str = "loose"
    rows: int = 2
    power = 3
    beta = SignedPower.beta
    jacobian = SignedPower.jacobian
    curvature = SignedPower.curvature


def nan_loss(s, p, y):
    value, slope, curve = huber(s, p, y)
    return value * jnp.nan, slope, curve


FLOW = samflow.Flow(2.0, samflow.LogSpaced(9))
MODEL = {
    "beta of the wrong shape": lambda: base_call(P(beta=lambda s, t: beta(s, t)[:2])),
    "beta does not reduce the rows": lambda: base_call(P(beta=lambda s, t: t**3)),
    "beta a scalar": lambda: base_call(P(beta=lambda s, t: jnp.sum(t))),
    "jacobian transposed": lambda: base_call(
        P(jacobian=lambda s, t: jnp.swapaxes(jacobian(s, t), 0, 1))
    ),
    "beta int32": lambda: base_call(P(beta=lambda s, t: beta(s, t).astype(jnp.int32))),
    "beta complex": lambda: base_call(P(beta=lambda s, t: beta(s, t).astype(jnp.complex128))),
    "beta calls NumPy": lambda: base_call(P(beta=lambda s, t: np.asarray(t)[0] ** 3)),
    "beta calls float()": lambda: base_call(P(beta=lambda s, t: beta(s, t) * float(t[0, 0]))),
    "beta a tuple": lambda: base_call(P(beta=lambda s, t: (beta(s, t),))),
    "beta None": lambda: base_call(P(beta=lambda s, t: None)),
    "derivatives None": lambda: base_call(loss=L(derivatives=lambda s, p, y: None)),
    "derivatives two values": lambda: base_call(
        loss=L(derivatives=lambda s, p, y: huber(s, p, y)[:2])
    ),
    "derivatives a scalar": lambda: base_call(loss=L(derivatives=lambda s, p, y: jnp.sum(p))),
    "derivatives a wrong-shaped slope": lambda: base_call(
        loss=L(derivatives=lambda s, p, y: (huber(s, p, y)[0], p[0], huber(s, p, y)[2]))
    ),
    "a non-frozen dataclass": lambda: base_call(Loose()),
    "jacobian [1, d]": lambda: base_call(P(jacobian=lambda s, t: jacobian(s, t)[:1])),
    "curvature of the wrong shape": lambda: base_call(P(curvature=lambda s, t: curvature(s, t)[0])),
    "int32 loss derivatives": lambda: base_call(
        loss=L(derivatives=lambda s, p, y: tuple(a.astype(jnp.int32) for a in huber(s, p, y)))
    ),
    "beta NaN under a flow": lambda: base_call(
        P(beta=lambda s, t: beta(s, t) * jnp.nan), runner=FLOW
    ),
    "a loss value of NaN under a flow": lambda: base_call(
        loss=L(derivatives=nan_loss), runner=FLOW
    ),
}
# The class and method each model case must name.
WHERE = {
    **{k: "Faulty.beta" for k in MODEL if k.startswith("beta")},
    "jacobian transposed": "Faulty.jacobian",
    "jacobian [1, d]": "Faulty.jacobian",
    "curvature of the wrong shape": "Faulty.curvature",
    "a non-frozen dataclass": "Loose.__hash__",
    **{k: "FaultyHuber.derivatives" for k in MODEL if "derivatives" in k or "loss" in k},
}

SETTINGS = {
    "Flow(solver=diffrax.Euler())": lambda: samflow.Flow(solver=diffrax.Euler()),
    "Flow(solver=diffrax.Dopri5)": lambda: samflow.Flow(solver=diffrax.Dopri5),
    "Flow(solver=SemiImplicitEuler())": lambda: samflow.Flow(solver=diffrax.SemiImplicitEuler()),
    "Flow(solver=EulerHeun())": lambda: samflow.Flow(solver=diffrax.EulerHeun()),
    "Discrete(steps=40, save=LogSpaced(10**12))": lambda: samflow.Discrete(
        steps=40, save=samflow.LogSpaced(10**12)
    ).n_records(),
    "At((0, True))": lambda: samflow.At((0, True)),
    "At([0, 1e300])": lambda: samflow.At([0, 1e300]),
    "Flow(tau_max=2.0, tau_cap=1e308)": lambda: samflow.Flow(tau_max=2.0, tau_cap=1e308),
    "compile_cache.enable(123)": lambda: compile_cache.enable(123),
}

GRID = {"alpha": [0.1, 0.2], "eta": [0.05, 0.1]}
VALIDITY = {
    f"validity_map({k}={v!r})": (lambda k=k, v=v: validity_map("sam-l2", **{**GRID, k: v}))
    for k, v in (
        ("alpha", "0.1,1"),
        ("alpha", ["a"]),
        ("alpha", [0.1 + 1j]),
        ("handoff_rtol", "x"),
        ("tau_cover", 0),
        ("tau_cover", -1),
        ("tau_cover", float("nan")),
        ("tau_cover", float("inf")),
    )
}


def command(*argv):
    """A command line's status and the lines it writes to stderr (joined by |)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = cli(list(argv))
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    return f"exit {status}: {' | '.join(lines) if lines else '(nothing on stderr)'}"


TMP = Path(tempfile.mkdtemp(prefix="user_errors_"))
for options in (["--max-steps", "0"], ["--tau-cover", "0"], ["--figure", ""],
                ["--steps", "1000000000000"]):  # fmt: skip
    VALIDITY["samflow validity " + " ".join(map(repr, options))] = lambda o=options: command(
        "validity", "--out", str(TMP / "v.nc"), *o
    )

TRAJECTORY = ["trajectory", "--method", "sam-l2", "--depth", "2", "--mu", "1,2", "--alpha", "0.5",
              "--rho", "0.1", "--out", str(TMP / "t.nc")]  # fmt: skip


def interrupted_after_final_write():
    """Ctrl-C once the final file is written, before its work folder is removed; then the
    same command again with a stale work folder beside the complete file."""
    from samflow.sweeps import store

    out = TMP / "s.nc"
    argv = ["phase", "--method", "gd", "--depth", "2", "--mu", "1,2", "--axis",
            "alpha=0.1:1:6:log", "--eta", "0.1", "--steps", "20", "--chunk", "2",
            "--out", str(out)]  # fmt: skip
    write = store.write_dataset

    def write_then_interrupt(ds, path, compress=True, checksum=False):
        written = write(ds, path, compress, checksum)
        if not checksum:
            raise KeyboardInterrupt
        return written

    store.write_dataset = write_then_interrupt
    try:
        first = command(*argv)
    finally:
        store.write_dataset = write
    left = sorted(p.name for p in TMP.iterdir() if p.name.startswith("s.nc"))
    (TMP / "s.nc.work").mkdir(exist_ok=True)
    (TMP / "s.nc.work" / "chunk_x.nc").write_bytes(b"stale")
    again = command(*argv)
    after = sorted(p.name for p in TMP.iterdir() if p.name.startswith("s.nc"))
    return f"{first}; left {left}; rerun beside a stale folder: {again}; left {after}"


def overwrite_of_stale_text():
    """A finished file of the same sweep whose attribute text is not this version's: a
    plain rerun and ``--overwrite``."""
    import xarray as xr

    out = TMP / "o.nc"
    argv = ["phase", "--method", "gd", "--depth", "2", "--mu", "1,2", "--axis",
            "alpha=0.1:1:4:log", "--eta", "0.1", "--steps", "20", "-q",
            "--out", str(out)]  # fmt: skip
    command(*argv)

    def age():
        ds = xr.load_dataset(out)
        ds["loss"].attrs["long_name"] = "old text"
        out.unlink()
        ds.to_netcdf(out)

    age()
    plain = command(*argv)
    age()
    forced = command(*argv, "--overwrite")
    text = xr.load_dataset(out)["loss"].attrs["long_name"]
    return f"rerun: {plain}; --overwrite: {forced}, long_name now {text!r}"


OTHER = {
    "samflow trajectory --steps 4000000000000000000": lambda: command(
        *TRAJECTORY, "--steps", "4000000000000000000"
    ),
    "samflow trajectory --steps 1000000000000 (past a day here only)": lambda: command(
        *TRAJECTORY, "--steps", "1000000000000"
    ),
    "samflow phase over a same-key file of old attribute text": overwrite_of_stale_text,
    "Ctrl-C just after the final write of samflow phase --chunk": interrupted_after_final_write,
}


def say(case: str, call) -> str:
    """Run ``call``; the first line of what samflow says."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call()
        except Exception as e:  # what the user sees, whatever it is
            text = str(e).strip().splitlines()
            return f"{type(e).__name__}: {text[0] if text else ''}"
    said = [str(w.message).splitlines()[0] for w in caught if "samflow" in w.filename
            or "samflow" in str(w.message) or issubclass(w.category, RuntimeWarning)]  # fmt: skip
    if isinstance(result, str):
        return result
    if hasattr(result, "attrs"):
        a = result.attrs
        record = ", ".join(
            f"{k} {a[k]}" for k in ("failed_step", "solver_failed", "stop_tau") if k in a
        )
        return (f"warning: {said[0]}; " if said else "no error, no warning; ") + f"record: {record}"
    return f"accepted ({result!r})" if not said else f"warning: {said[0]}"


def main() -> None:
    named = 0
    for title, cases in (("model", MODEL), ("settings", SETTINGS), ("validity", VALIDITY),
                         ("other", OTHER)):  # fmt: skip
        print(f"## {title}")
        for case, call in cases.items():
            text = say(case, call)
            print(f"{case} -> {text}", flush=True)
            if title == "model" and WHERE[case] in text:
                named += 1
    print(f"model cases naming the user's class and method: {named} of {len(MODEL)}")


if __name__ == "__main__":
    main()
