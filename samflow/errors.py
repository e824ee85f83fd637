"""Errors the command line reports as one line: bad input (exit 2), failures (exit 1)."""


class InputError(ValueError):
    """Bad user input: the message names the bad value (exit status 2).

    Raised by every constructor and entry point of samflow before anything is computed
    or compiled; a subclass of ``ValueError``, so code that catches that catches it.
    Its one argument is the message: one line naming the bad value and what is wanted.

    Examples:
        >>> import samflow
        >>> try:
        ...     samflow.Flow(tau_max=-1.0)
        ... except samflow.InputError as error:
        ...     print(error)
        tau-max must be > 0, got -1.0
        >>> issubclass(samflow.InputError, ValueError)
        True
    """


class RunFailure(RuntimeError):
    """The run could not be done though the input was fine: the network, the disk, a
    file in use by another run (exit status 1)."""
