"""Helpers the tests share (and benchmarks import as ``tests.support``): builders of the real
Java DLedger and RocketMQ, encoders, the simulator, the fault harness, ports, reference stores."""
