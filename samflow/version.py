"""The installed version of samflow (``0.0.0+unknown`` in a source tree without one)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("samflow")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"
