"""A sweep's resume key (:meth:`samflow.SweepSpec.key`) is computed from the spec's fields
and the settings objects in it, generically (issue 31): equal specs share it, any field
of any object that differs from its default changes it, and a default written out gives
the key of leaving it out."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

import samflow
from samflow.sweeps.spec import SweepSpec

MU = [1.0, 2.0, 3.0]
BASE = dict(depth=2, mu=MU, rho=0.5, axes={"alpha": [0.1, 1.0]})

OTHER = {
    samflow.Classification: {"collapse_factor": 1e-2, "plateau_fraction": 0.3},
    samflow.Summaries: {"test_error": None, "sharpness": True, "active_threshold": 1e-2},
    samflow.Discrete: {
        "eta": 0.02,
        "steps": 300,
        "save": samflow.Every(3),
        "batch": None,
        "m": None,
        "label_noise": None,
        "step_cap": 30_000,
    },
    samflow.Flow: {
        "tau_max": 20.0,
        "save": samflow.At((0.0, 1.0, 20.0)),
        "rtol": 1e-7,
        "atol": 1e-9,
        "solver": "dopri5",
        "max_steps": 5000,
        "formulation": "linear",
        "tau_cap": 400.0,
    },
    samflow.Every: {"k": 7},
    samflow.LogSpaced: {"n": 50, "first": 1e-3},
    samflow.At: {"times": (0, 5, 300)},
}
"""A value other than the default for every field of every settings object (None: a
field that needs a spec of its own, tested beside); a field added to an object without
an entry here fails :func:`test_every_field_is_covered`."""


def spec(runner=None, **kwargs) -> SweepSpec:
    runner = samflow.Flow(tau_max=10.0) if runner is None else runner
    return SweepSpec.from_inputs("sam-l2", runner=runner, **{**BASE, **kwargs})


def test_every_field_is_covered():
    for kind, other in OTHER.items():
        assert set(other) == {f.name for f in fields(kind)}, kind.__name__


def test_equal_specs_share_a_key():
    assert spec().key() == spec().key()
    made = spec(classification=samflow.Classification(), summaries=samflow.Summaries())
    assert made.key() == spec(summaries=True).key()


@pytest.mark.parametrize("kind", [samflow.Discrete, samflow.Flow])
def test_every_runner_field_changes_the_key(kind):
    base = spec(runner=kind())
    seen = {base.key()}
    for name, value in OTHER[kind].items():
        if value is None:
            continue
        key = spec(runner=kind(**{name: value})).key()
        assert key not in seen, name
        seen.add(key)


def test_every_schedule_field_changes_the_key():
    keys = {spec(runner=samflow.Discrete()).key()}
    for save in (
        samflow.Every(7),
        samflow.LogSpaced(50),
        samflow.LogSpaced(50, first=3.0),
        samflow.At((0, 5, 20_000)),
        samflow.At((0, 6, 20_000)),
    ):
        keys.add(spec(runner=samflow.Discrete(save=save)).key())
    for save in (samflow.LogSpaced(50), samflow.LogSpaced(199, first=1e-3)):
        keys.add(spec(runner=samflow.Flow(tau_max=10.0, save=save)).key())
    keys.add(spec().key())
    assert len(keys) == 9


@pytest.mark.parametrize("name", sorted(OTHER[samflow.Classification]))
def test_every_classification_field_changes_the_key(name):
    changed = samflow.Classification(**{name: OTHER[samflow.Classification][name]})
    assert spec(classification=changed).key() != spec().key()


def test_every_summaries_field_changes_the_key():
    keys = {spec().key(), spec(summaries=True).key()}
    for name in ("sharpness", "active_threshold"):
        keys.add(spec(summaries=samflow.Summaries(**{name: OTHER[samflow.Summaries][name]})).key())
    keys.add(spec(summaries=True, beta_star=[1.0, 0.0, 0.0]).key())  # test_error
    assert len(keys) == 5


def test_the_stochastic_fields_and_the_seed_change_the_key():
    data = dict(mu=None, data=([[1.0, 2.0], [2.0, 1.0], [1.0, 3.0], [3.0, 1.0]], [1, -1, 1, -1]))
    runner = samflow.Discrete(steps=10)
    base = spec(runner=runner, **data)
    keys = {base.key()}
    for changed in (dict(batch=2), dict(m=2), dict(batch=2, m=1)):
        keys.add(spec(runner=replace(runner, **changed), **data).key())
    keys.add(spec(runner=replace(runner, batch=2), seed=3, **data).key())
    assert len(keys) == 5
    noisy = dict(mu=None, data=(data["data"][0], [0.5, 1.0, 2.0, 0.1]))
    a = spec(runner=samflow.Discrete(steps=10, label_noise=0.1), loss="squared", **noisy)
    b = spec(runner=samflow.Discrete(steps=10), loss="squared", **noisy)
    assert a.key() != b.key()


def test_spec_fields_change_the_key():
    base = spec().key()
    for changed in (
        dict(alpha=None, axes={"rho": [0.1, 1.0]}, rho=None),
        dict(depth=3),
        dict(dtype="float32"),
        dict(rho=0.6),
        dict(mu=[1.0, 2.0, 4.0]),
        dict(pad_layers=4),
        dict(save_trajectories=True),
        dict(loss="exponential"),
        dict(axes={"alpha": [0.1, 2.0]}),
    ):
        assert spec(**changed).key() != base, changed


def test_a_default_written_out_gives_the_same_key():
    flow = samflow.Flow(tau_max=10.0)
    written = samflow.Flow(
        tau_max=10.0, save=samflow.LogSpaced(199), rtol=1e-8, solver="tsit5", tau_cap=None
    )
    assert spec(runner=written).key() == spec(runner=flow).key()
    discrete = spec(runner=samflow.Discrete()).key()
    assert spec(runner=samflow.Discrete(save=samflow.Every(None))).key() == discrete
    assert spec(runner=samflow.Discrete(label_noise=0.0, batch=None)).key() == (
        spec(runner=samflow.Discrete()).key()
    )
    both = samflow.Classification(collapse_factor=1e-3, plateau_fraction=0.5)
    assert spec(classification=both).key() == spec().key()
    assert spec(summaries=samflow.Summaries(active_threshold=1e-3)).key() == (
        spec(summaries=samflow.Summaries()).key()
    )
    assert spec(dtype="float64", pad_layers=0, loss="logistic").key() == spec().key()
