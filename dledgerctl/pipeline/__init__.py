"""The PySpark pipeline: the ``dledger`` data source and the jobs built on it.

pyspark is imported only inside this package (by ``source``, ``session``, ``jobs`` and
``audit``); ``batches``, the reader a Spark task runs, needs pyarrow but not pyspark;
``inputs`` and ``errors`` need neither. Executors need ``store`` and
``dledgerctl.pipeline`` importable: installed, or shipped by
:func:`dledgerctl.pipeline.session.start_session` as a zip (``--py-files`` style).
"""
