"""Keywords removed in 0.2.0 (CHANGELOG.md) are refused with a TypeError that names what
replaced them, wherever 0.1.0 took them, and the replacement named is one that works."""

import inspect

import pytest

import samflow
from samflow._removed import REPLACEMENTS
from samflow.sweeps.spec import SweepSpec

# Where 0.1.0 took each keyword (git: fa3f3ba moved the save keywords into schedule
# objects, c2b7fd3 the classification and summaries keywords into settings objects).
WHERE = {
    "Discrete": (samflow.Discrete, ("record_every", "log_records", "record_steps")),
    "Flow": (samflow.Flow, ("n_save", "tau_min", "save_tau")),
    "trajectory": (samflow.trajectory, ("collapse_factor", "sharpness", "active_threshold")),
    "sweep": (
        samflow.sweep,
        ("collapse_factor", "plateau_fraction", "sharpness", "active_threshold"),
    ),
    "boundary": (samflow.boundary, ("collapse_factor",)),
    "SweepSpec": (
        SweepSpec,
        ("collapse_factor", "plateau_fraction", "sharpness", "active_threshold"),
    ),
    "SweepSpec.from_inputs": (
        SweepSpec.from_inputs,
        ("collapse_factor", "plateau_fraction", "sharpness", "active_threshold"),
    ),
}
CASES = [(owner, name) for owner, (_, names) in WHERE.items() for name in names]


@pytest.mark.parametrize(("owner", "name"), CASES)
def test_a_removed_keyword_names_its_replacement(owner, name):
    target, _ = WHERE[owner]
    with pytest.raises(TypeError) as error:
        target(**{name: 1})  # refused before any other argument is looked at
    message = str(error.value)
    assert f"{owner}() no longer takes {name}=" in message
    assert REPLACEMENTS[name] in message
    # The refusal never hides a keyword the callable takes today.
    assert name not in inspect.signature(target).parameters


def test_the_replacements_work():
    # Each replacement, written as the message says with sample values, makes a valid
    # object whose field holds the value the removed keyword held.
    values = {"record_every": 7, "log_records": 5, "record_steps": (0, 3, 9), "n": 4}
    values |= {"n_save": 200, "tau_min": 0.5, "save_tau": (0.0, 1.0, 2.0)}
    made = {}
    for name, replacement in REPLACEMENTS.items():
        keyword, expression = replacement.split("=", 1)
        expression = expression.replace("...", "0.25")
        made[name] = (keyword, eval(expression, {"samflow": samflow}, values))
    assert made["record_every"] == ("save", samflow.Every(7))
    assert made["n_save"] == ("save", samflow.LogSpaced(199))  # 0 and 199 times: 200 saves
    assert samflow.Flow(tau_max=10.0, save=made["n_save"][1]).times().size == 200
    assert made["tau_min"][1].first == 0.5
    assert made["save_tau"][1].times == (0.0, 1.0, 2.0)
    assert made["collapse_factor"] == ("classification", samflow.Classification(0.25))
    assert made["plateau_fraction"][1].plateau_fraction == 0.25
    assert made["sharpness"] == ("summaries", samflow.Summaries(sharpness=True))
    assert made["active_threshold"][1].active_threshold == 0.25


def test_calls_without_removed_keywords_go_through():
    runner = samflow.Discrete(eta=0.1, steps=10, save=samflow.Every(5))
    assert runner.times().tolist() == [0, 5, 10]
    assert "classification" in inspect.signature(samflow.trajectory).parameters
    assert samflow.Flow.__init__.__wrapped__ is not None  # the dataclass's own __init__
