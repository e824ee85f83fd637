"""Errors that the command line reports as one line with exit status 2."""


class InputError(ValueError):
    """Bad user input: the message names the bad value."""
