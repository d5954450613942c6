"""dledgerctl: the command line (app.py) over cluster/ and store/."""

__version__ = "0.1.0"  # (pyproject.toml reads it: [tool.setuptools.dynamic])
