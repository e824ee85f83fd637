"""``samflow data download``: fetch an image data set (:mod:`samflow.images.download`:
checked against its SHA-256, resumable). The options are checked before anything is
fetched; ``-q`` prints nothing but errors.
"""

from __future__ import annotations

import argparse
import sys

from samflow.commands.cnn import printer
from samflow.commands.common import add_output_args
from samflow.errors import InputError
from samflow.images import data as image_data
from samflow.images.download import BASE_URL_ENV, ByteProgress, download


def register(subparsers) -> None:
    """Add the ``data`` subcommand (``data download``)."""
    data = subparsers.add_parser("data", help="fetch image data sets")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    dl = data_sub.add_parser(
        "download",
        help="download a data set, verify its SHA-256, resume partial downloads",
    )
    dl.add_argument("name", choices=image_data.DATASETS)
    dl.add_argument(
        "--dir", help="data directory; files go to DIR/NAME/ (default: as for samflow cnn)"
    )
    dl.add_argument(
        "--base-url",
        help=f"http(s):// or file:// mirror to fetch from (default: ${BASE_URL_ENV}, else "
        "the canonical)",
    )
    add_output_args(dl)
    dl.set_defaults(func=run_download)


def run_download(args: argparse.Namespace) -> int:
    """Download a data set; exit status."""
    say = printer(args.quiet)
    if args.dir is not None and not args.dir.strip():
        raise InputError("--dir is empty")
    directory = image_data.resolve_data_dir(args.dir)
    progress = None if args.quiet else ByteProgress(sys.stderr)
    download(args.name, directory, base_url=args.base_url, log=say, progress=progress)
    say(f"done: {args.name} in {directory / args.name}")
    return 0
