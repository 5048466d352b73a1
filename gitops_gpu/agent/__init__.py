"""The node agent: reads NVML (``nvml``, the only pynvml importer) and publishes a NodeGPUReport.

Public surface: :func:`run_agent` (the loop), :func:`make_agent` (one node's agent, stepped
pass by pass), :mod:`.report` (the status dict), :mod:`.publish` (server-side apply), and
:mod:`.fake_nvml` (the snapshot-driven stand-in for pynvml on machines without GPUs).
"""

from gitops_gpu.agent.loop import Agent, make_agent, run_agent

__all__ = ["Agent", "make_agent", "run_agent"]
