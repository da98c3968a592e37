"""Traces: the canonical format `spotline simulate` replays, and adapters from public traces."""

from spotline.trace.canonical import (
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    Trace,
    TraceError,
    TraceJob,
    format_trace,
    parse_trace,
    read_trace,
    write_trace,
)
from spotline.trace.philly import PRIORITY_MIX, parse_when, read_philly

__all__ = [
    "OPTIONAL_COLUMNS",
    "PRIORITY_MIX",
    "REQUIRED_COLUMNS",
    "Trace",
    "TraceError",
    "TraceJob",
    "format_trace",
    "parse_trace",
    "parse_when",
    "read_philly",
    "read_trace",
    "write_trace",
]
