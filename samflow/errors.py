"""Errors the command line reports as one line: bad input (exit 2), failures (exit 1)."""


class InputError(ValueError):
    """Bad user input: the message names the bad value (exit status 2)."""


class RunFailure(RuntimeError):
    """The run could not be done though the input was fine: the network, the disk, a
    file in use by another run (exit status 1)."""
