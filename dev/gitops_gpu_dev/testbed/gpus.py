"""GPU products the testbed can fake: the labels GFD and NFD would put on a real node.

Values follow GFD's label formats (gpu.memory in MiB, family from compute capability); the
memory sizes are what `nvidia-smi --query-gpu=memory.total` reports for each product.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuProduct:
    product: str  # nvidia.com/gpu.product
    memory_mib: int
    family: str
    compute: tuple[int, int]
    count: int  # GPUs in a typical node of this product
    mig_capable: bool
    snapshot: str  # NVML snapshot file (gitops_gpu/data/nvml-snapshots/<name>.json)


PRODUCTS: dict[str, GpuProduct] = {
    p.product: p
    for p in (
        GpuProduct("NVIDIA-H100-80GB-HBM3", 81559, "hopper", (9, 0), 8, True, "h100-80gb"),
        GpuProduct("NVIDIA-H200", 143771, "hopper", (9, 0), 8, True, "h100-80gb"),
        GpuProduct("NVIDIA-A100-SXM4-40GB", 40960, "ampere", (8, 0), 8, True, "a100-40gb"),
        GpuProduct("NVIDIA-A100-SXM4-80GB", 81920, "ampere", (8, 0), 8, True, "a100-40gb"),
        GpuProduct("NVIDIA-L40S", 46068, "ada-lovelace", (8, 9), 4, False, "l40s"),
        GpuProduct("NVIDIA-B200", 183359, "blackwell", (10, 0), 8, True, "b200"),
    )
}
DEFAULT_PRODUCT = "NVIDIA-H100-80GB-HBM3"

NFD_LABELS = {
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "feature.node.kubernetes.io/kernel-version.full": "6.8.0-1015-nvidia",
    "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
    "feature.node.kubernetes.io/system-os_release.VERSION_ID": "24.04",
}


def gfd_labels(product: str) -> dict[str, str]:
    """Static GFD labels for a product (driver/CUDA labels come from the simulator)."""
    spec = PRODUCTS.get(product, PRODUCTS[DEFAULT_PRODUCT])
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(spec.memory_mib),
        "nvidia.com/gpu.count": str(spec.count),
        "nvidia.com/gpu.family": spec.family,
        "nvidia.com/gpu.compute.major": str(spec.compute[0]),
        "nvidia.com/gpu.compute.minor": str(spec.compute[1]),
        "nvidia.com/mig.capable": "true" if spec.mig_capable else "false",
        "nvidia.com/gpu.machine": "DGX" if spec.count == 8 else "server",
    }
