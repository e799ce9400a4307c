"""volumetool: the command-line toolkit for the SQLite data volumes of AI agents."""

__version__ = "0.1.0"
