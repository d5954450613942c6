"""Builds the compiled parts; everything else is in pyproject.toml. Every extension is
optional: without a C compiler the install goes on and the Python code they mirror runs
instead (the tests say which one a run has).

- store._lanes: the store's per-entry lanes (store/_lanes.c; tests/store/test_store_lanes.py);
- store._flusher: a node's flush thread, which never takes the interpreter lock
  (store/_flusher.c, Linux only; tests/store/test_store_flusher.py);
- cluster.net._frames: cutting received bytes into frames (cluster/net/_frames.c;
  tests/net/test_wire_frames.py);
- store.rocketmq._columns: the columns of many RocketMQ messages at once, for mq topics
  and mq check, and their index keys for mq migrate and mq rebuild (store/rocketmq/_columns.c;
  tests/rocketmq/test_rocketmq_columns.py);
- store.rocketmq._placing: messages copied into a new commit log, and index keys chained into
  an index file, for mq migrate and mq rebuild (store/rocketmq/_placing.c;
  tests/rocketmq/test_mq_moving.py).
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(ext_modules=[Extension("store._lanes", ["store/_lanes.c"], optional=True, extra_compile_args=FLAGS,
                             depends=["store/_crc32.h"]),
                   Extension("store._flusher", ["store/_flusher.c"], optional=True, extra_compile_args=FLAGS),
                   Extension("cluster.net._frames", ["cluster/net/_frames.c"], optional=True, extra_compile_args=FLAGS),
                   Extension("store.rocketmq._columns", ["store/rocketmq/_columns.c"], optional=True,
                             extra_compile_args=FLAGS, depends=["store/_crc32.h"]),
                   Extension("store.rocketmq._placing", ["store/rocketmq/_placing.c"], optional=True,
                             extra_compile_args=FLAGS)])
