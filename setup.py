"""Builds store._lanes, the store's compiled per-entry lanes; everything else is in
pyproject.toml. The extension is optional: without a C compiler the install goes on and
the store uses its Python lanes (tests/test_store_lanes.py says which one a run has)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("store._lanes", ["store/_lanes.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
