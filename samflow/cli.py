"""The ``samflow`` command line.

Subcommands live in their own modules; each exposes ``register(subparsers)`` that
adds its parser and sets ``func`` (``args -> exit status``). Bad input of any kind
ends with exit status 2 and one line ``samflow: error: ...`` on stderr, before any
computation; a run that fails for another reason (network, disk, an output in use)
ends with exit status 1 and one line ``samflow: failed: ...``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from samflow import __version__, compile_cache
from samflow.errors import InputError, RunFailure

COMMAND_MODULES = (
    "samflow.commands.trajectory",
    "samflow.commands.phase",
    "samflow.commands.boundary",
    "samflow.commands.figures",
    "samflow.commands.demo",
    "samflow.images.cli",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2, and takes no
    abbreviated options (``--alpha`` must never mean ``--alpha-range``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        raise InputError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="samflow",
        description="Simulate GD and SAM (l2, linf, unnormalised) on linear diagonal "
        "networks and CNNs; map their implicit-bias regimes.",
    )
    parser.add_argument("--version", action="version", version=f"samflow {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from samflow.devices import use_cpu_cores

    use_cpu_cores()  # the command line owns its process: one JAX device per core
    parser = build_parser()
    try:
        _name_unknown_options(parser, argv)
        args = parser.parse_args(argv)
        args.command_line = "samflow " + " ".join(argv)
        compile_cache.enable(getattr(args, "compile_cache", None))
        status = args.func(args)
    except (InputError, FileNotFoundError) as err:
        print(f"samflow: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except (RunFailure, OSError) as err:
        print(f"samflow: failed: {_one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("samflow: interrupted", file=sys.stderr)
        return 130
    return int(status or 0)


def _name_unknown_options(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An unknown option is named before anything else is said about the command line
    (argparse would first complain about missing required options)."""
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
    known = set(sub._option_string_actions)
    for token in argv[len(names) :]:
        if token == "--":
            break
        if token.startswith("--") and token.split("=", 1)[0] not in known:
            raise InputError(f"{' '.join(names)}: unknown option {token.split('=', 1)[0]!r}")


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
