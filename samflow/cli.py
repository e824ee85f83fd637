"""The ``samflow`` command line.

Subcommands live in their own modules; each exposes ``register(subparsers)`` that
adds its parser and sets ``func`` (``args -> exit status``). Bad input of any kind
ends with exit status 2 and one line ``samflow: error: ...`` on stderr, before any
computation; a run that fails for another reason (network, disk, an output in use)
ends with exit status 1 and one line ``samflow: failed: ...``. Ctrl-C ends a command
within seconds with exit status 130 and ``samflow: interrupted``, keeping what it had
finished and no temporary file (:mod:`samflow.interrupt`).

JAX is imported only by a command that computes, after its inputs are checked: the
command modules import the engine inside their ``run``, and the image commands
(:data:`LAZY_COMMANDS`) are only imported when named, so ``samflow --help`` and a bad
command line answer at once.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence

from samflow import compile_cache
from samflow.errors import InputError, RunFailure
from samflow.host_memory import reuse_host_memory
from samflow.interrupt import interruptible

COMMAND_MODULES = (
    "samflow.commands.trajectory",
    "samflow.commands.phase",
    "samflow.commands.boundary",
    "samflow.commands.validity",
    "samflow.commands.figures",
    "samflow.commands.demo",
)
LAZY_COMMANDS = {
    "cnn": (
        "samflow.commands.cnn",
        "train a CNN (or the diagonal network) on images with GD / SAM; Grad-CAM",
    ),
    "data": ("samflow.commands.data", "fetch image data sets"),
}
"""Commands whose module imports JAX at once: name -> (module, one-line help). Their
module is imported only when the command is named; ``--help`` lists the line."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2, and takes no
    abbreviated options (``--alpha`` must never mean ``--alpha-range``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        raise InputError(message)


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked for (the look-up
    imports importlib.metadata, a tenth of a second)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from samflow.version import __version__

        print(f"samflow {__version__}")
        parser.exit()


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; the modules of :data:`LAZY_COMMANDS` are imported only when ``argv``
    names one of their commands (else each is listed by its help line)."""
    parser = OneLineParser(
        prog="samflow",
        description="Simulate GD and SAM (l2, linf, unnormalised) on linear diagonal "
        "networks and CNNs; map their implicit-bias regimes.",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="show program's version number and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    named = next((a for a in argv if not a.startswith("-")), None)
    lazy = {LAZY_COMMANDS[named][0]} if named in LAZY_COMMANDS else set()
    for name in (*COMMAND_MODULES, *lazy):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        module.register(sub)
    for command, (_, text) in LAZY_COMMANDS.items():
        if command not in sub.choices:
            sub.add_parser(command, help=text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); the exit status.

    Without ``argv`` it is the program itself: once the command is done, Ctrl-C ends
    the process at once (the default action of SIGINT) instead of raising in the
    interpreter's shutdown, where an interrupted file close could hang it.
    """
    program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    finally:
        if program and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_DFL)


def _main(argv: list[str]) -> int:
    try:
        parser = build_parser(argv)
        _check_options(parser, argv)
        args = parser.parse_args(argv)
        args.command_line = "samflow " + " ".join(argv)
        compile_cache.enable(getattr(args, "compile_cache", None))
        with _cpu_cores(), interruptible():
            status = _retried_without_cache(args)
    except (InputError, FileNotFoundError) as err:
        print(f"samflow: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except (RunFailure, OSError, MemoryError) as err:
        print(f"samflow: failed: {_one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("samflow: interrupted", file=sys.stderr)
        return 130
    return int(status or 0)


EXPECTED = (InputError, FileNotFoundError, RunFailure, OSError, MemoryError)
"""Failures a command reports as its own (bad input, disk, network): never the cache's."""


def _retried_without_cache(args: argparse.Namespace) -> int:
    """``args.func(args)``; when it fails otherwise than :data:`EXPECTED` with the
    persistent compile cache on, once more without the cache, saying so in one line
    naming the folder (a cached program may be at fault; files are written atomically
    and sweeps resume, so the second run picks up what the first finished)."""
    try:
        return args.func(args)
    except EXPECTED:
        raise
    except Exception as err:
        folder = compile_cache.folder_in_use()
        if folder is None:
            raise
        print(
            f"samflow: the run failed with the compile cache {folder} on "
            f"({type(err).__name__}: {_one_line(err)}); retrying once without it, as "
            f"--compile-cache {compile_cache.OFF} does",
            file=sys.stderr,
        )
        compile_cache.turn_off()
        return args.func(args)


class _cpu_cores:
    """The command line owns its process: one JAX device per CPU core
    (:func:`samflow.devices.use_cpu_cores`), so that sweeps shard over every core, and
    freed memory kept for the next chunk (:func:`samflow.host_memory.reuse_host_memory`).

    JAX reads ``JAX_NUM_CPU_DEVICES`` when it is imported, which a command does only
    once its inputs are checked; set for the command's duration (not the caller's,
    when ``main`` runs inside another program), or through JAX's config when it is
    already imported.
    """

    NAME = "JAX_NUM_CPU_DEVICES"

    def __enter__(self) -> None:
        self.set = False
        if "jax" in sys.modules:
            from samflow.devices import use_cpu_cores

            use_cpu_cores()
        elif self.NAME not in os.environ and "device_count" not in os.environ.get("XLA_FLAGS", ""):
            os.environ[self.NAME] = str(os.cpu_count() or 1)
            self.set = True
        reuse_host_memory()

    def __exit__(self, *exc) -> None:
        if self.set:
            del os.environ[self.NAME]


def _check_options(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An unknown option is named before anything else is said about the command line
    (argparse would first complain about missing required options); an option given
    twice is refused (argparse keeps the last silently), unless it is repeatable."""
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        raise InputError(f"unknown option {argv[0]!r} (options go after the command)")
    names, sub = [], parser
    while True:  # descend into nested subcommands (``data download``)
        commands = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        rest = argv[len(names) :]
        if not commands or not rest or rest[0] not in commands[0].choices:
            break
        names.append(rest[0])
        sub = commands[0].choices[rest[0]]
    if not names:
        return
    known = sub._option_string_actions
    seen: dict[argparse.Action, str] = {}
    for token in argv[len(names) :]:
        if token == "--":
            break
        flag = token.split("=", 1)[0]
        if token.startswith("--") and flag not in known:
            raise InputError(f"{' '.join(names)}: unknown option {flag!r}")
        action = known.get(flag) if token.startswith("-") else None
        if action is None or isinstance(action, argparse._AppendAction):
            continue
        if action in seen:
            raise InputError(
                f"{' '.join(names)}: option {flag} given twice ({seen[action]} and {token})"
            )
        seen[action] = token


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
