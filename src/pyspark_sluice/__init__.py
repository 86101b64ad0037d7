"""Lets ``spark.read.format("sluice")`` work with no registration call.

PySpark looks up a top-level module ``pyspark_<format>`` and registers its
``DefaultSource`` the first time the format is used.
"""

from sluice.spark.source import SluiceDataSource as DefaultSource

__all__ = ["DefaultSource"]
