"""The one harness of every benchmark family: bodies, machine facts, server places, private
servers and worker processes, percentiles, shared options and report writing. Families import
from here."""

from bench.harness.bodies import body_size, chunks, encode, make_bodies
from bench.harness.busy import machine_busy
from bench.harness.facts import (
    MEMORY_FS,
    filesystem_of,
    host_facts,
    machine_facts,
    package_versions,
    pg_facts,
    source_revision,
    store_facts,
)
from bench.harness.options import add_common_options
from bench.harness.places import (
    DEFAULT_SLUICE_URL,
    PG_CONNINFO,
    RABBIT_HOST,
    RABBIT_PASSWORD,
    RABBIT_PORT,
    RABBIT_USER,
    SchemaGuard,
    answers,
    drop_schema,
    is_postgres,
    pg_conninfo,
    rabbit_params,
    rabbit_version,
    url_schema,
)
from bench.harness.processes import signal_group, start_group, stop_groups
from bench.harness.redis_server import RedisTarget, free_port, private_redis, redis_target
from bench.harness.report import RESULTS, facts_table, one_line, report_path, write_report
from bench.harness.stats import percentile, summarize

__all__ = [
    "DEFAULT_SLUICE_URL",
    "MEMORY_FS",
    "PG_CONNINFO",
    "RABBIT_HOST",
    "RABBIT_PASSWORD",
    "RABBIT_PORT",
    "RABBIT_USER",
    "RESULTS",
    "RedisTarget",
    "SchemaGuard",
    "add_common_options",
    "answers",
    "body_size",
    "chunks",
    "drop_schema",
    "encode",
    "facts_table",
    "filesystem_of",
    "free_port",
    "host_facts",
    "is_postgres",
    "machine_busy",
    "machine_facts",
    "make_bodies",
    "one_line",
    "package_versions",
    "percentile",
    "pg_conninfo",
    "pg_facts",
    "private_redis",
    "rabbit_params",
    "rabbit_version",
    "redis_target",
    "report_path",
    "signal_group",
    "source_revision",
    "start_group",
    "stop_groups",
    "store_facts",
    "summarize",
    "url_schema",
    "write_report",
]
