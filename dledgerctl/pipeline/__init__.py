"""The PySpark pipeline: the ``dledger`` data source and the jobs built on it.

pyspark is imported only inside this package (by ``source``, ``session``, ``jobs`` and
``audit``); ``batches`` and ``commitlogs``, the readers a Spark task runs (of DLedger data
files and of master-slave commit-log files), need pyarrow but not pyspark;
``inputs`` and ``errors`` need neither. Executors need ``store`` and
``dledgerctl.pipeline`` importable: installed, or shipped by
:func:`dledgerctl.pipeline.session.start_session` as a zip (``--py-files`` style).
"""
