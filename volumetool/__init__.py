"""volumetool: the command-line toolkit for the SQLite data volumes of AI agents."""

__version__ = "0.1.0"

# Names the volume when a command's VOLUME argument is left out (volumetool.cli.options).
VOLUME_ENV = "VOLUMETOOL_VOLUME"
