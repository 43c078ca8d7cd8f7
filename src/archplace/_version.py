"""The version of the installed archplace: its package metadata, or ``"0+unknown"`` when the
package is run from a source tree that was never installed."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("archplace")
except PackageNotFoundError:
    __version__ = "0+unknown"
