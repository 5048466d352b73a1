"""Names shared by every layer: label and annotation keys, field manager, object names."""

from __future__ import annotations

FIELD_MANAGER = "gitops-gpu"
GROUP = "gitops-gpu.io"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gitops-gpu"

COMMIT_ANNOTATION = f"{GROUP}/commit"
POOL_ANNOTATION = f"{GROUP}/pool"
STAGE_ANNOTATION = f"{GROUP}/stage"
# On nodes: which label keys gitops-gpu set (so it never removes labels it did not set).
MANAGED_LABELS_ANNOTATION = f"{GROUP}/managed-labels"
# When gitops-gpu last changed a node's MIG or sharing labels: the ladder's grace starts there.
RELABELLED_ANNOTATION = f"{GROUP}/relabelled-at"
# On nodes: the pool that owns the node, set by gitops-gpu with the pool's labels.
POOL_LABEL = f"{GROUP}/pool"
# On nodes of pools with verifyNewNodes: NoSchedule until the ladder verified the node on the
# pool's commit (sync/verify_nodes.py); ours alone to add and remove. The annotation records
# the commit a node was verified on.
UNVERIFIED_TAINT = f"{GROUP}/unverified"
VERIFIED_ANNOTATION = f"{GROUP}/verified"
# On nodes gitops-gpu labelled UPGRADE_SKIP_LABEL=true to hold the operator's driver upgrade
# while their stage may not move (sync/upgrade_holds.py): why. Only such labels are removed.
UPGRADE_HOLD_ANNOTATION = f"{GROUP}/upgrade-held"

CLUSTER_POLICY_NAME = "cluster-policy"
CLUSTER_POLICY_API = ("nvidia.com/v1", "ClusterPolicy")
NVIDIA_DRIVER_API = ("nvidia.com/v1alpha1", "NVIDIADriver")
NODE_GPU_REPORT_API = (f"{GROUP}/v1alpha1", "NodeGPUReport")
# Top-level key the report informer adds to each cached NodeGPUReport: when the controller saw
# its content (observedAt included) last change, as an aware datetime. Not an apiserver field.
REPORT_SEEN_KEY = "_seen"

# GPU Operator node labels
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
# The MIG ConfigMap the operator creates and names when migManager.config.name is unset
# (controllers/object_controls.go MigPartedDefaultConfigMapName): the default catalogue.
DEFAULT_MIG_CONFIGMAP = "default-mig-parted-config"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
WORKLOAD_CONFIG_LABEL = "nvidia.com/gpu.workload.config"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
# GFD: the driver the node runs (what the engine compares before a MIG relabel).
DRIVER_VERSION_LABEL = "nvidia.com/cuda.driver-version.full"
UPGRADE_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"  # "true": the upgrade leaves the node be
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
DRIVER_OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"

# The GPU Operator chart's operator Deployment (its release name, as NVIDIA installs it).
OPERATOR_DEPLOYMENT = "gpu-operator"
