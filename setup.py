"""Builds the compiled parts; everything else is in pyproject.toml. Both extensions are
optional: without a C compiler the install goes on and the Python code they mirror runs
instead (the tests say which one a run has).

- store._lanes: the store's per-entry lanes (store/_lanes.c; tests/test_store_lanes.py);
- cluster._frames: cutting received bytes into frames (cluster/_frames.c;
  tests/test_wire_frames.py).
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(ext_modules=[Extension("store._lanes", ["store/_lanes.c"], optional=True, extra_compile_args=FLAGS),
                   Extension("cluster._frames", ["cluster/_frames.c"], optional=True, extra_compile_args=FLAGS)])
