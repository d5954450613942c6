"""The PySpark pipeline: the ``dledger`` data source and the jobs built on it.

pyspark (and pyarrow) are imported only inside this package, and only by its modules
``source``, ``session`` and ``jobs``/``audit``; ``inputs`` and ``errors`` need neither.
Executors need ``store`` and ``dledgerctl.pipeline`` importable: installed, or shipped
by :func:`dledgerctl.pipeline.session.start_session` as a zip (``--py-files`` style).
"""
