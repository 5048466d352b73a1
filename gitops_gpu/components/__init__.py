"""The verification ladder: one module per GPU Operator component, in deploy order.

Pure judges of :class:`evidence.NodeEvidence` against a pool's desired config
(:class:`~gitops_gpu.fleet.compiled.PoolTarget`): ``ladder.walk`` (a node), ``ladder.judge_pool``
(worst-of over a pool), ``drift.pool_drift`` (NVML vs desired, for ``plan``). The only IO is
``evidence.read_evidence``, which gathers nodes, NodeGPUReports and operator pods.
"""
