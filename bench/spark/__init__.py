"""The ``sluice`` Spark data source on ``local[2]``: reads against Spark's JDBC source, and
queue -> Spark SQL -> queue pipelines on SQLite and PostgreSQL."""
