"""Workloads: real traces, session statistics, agent workload models and Little's law."""
