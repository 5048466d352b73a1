"""A real local control plane (etcd, kube-apiserver, kube-controller-manager, kwok) and the
GPU Operator/NVML simulator that plays the operator's part for KWOK nodes."""
