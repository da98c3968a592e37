"""Example workloads that run under Spotline (usable as a job's `command`)."""
