"""The disruption tables against the GPU Operator v26.7.0's own source: every operand a rule
says a ClusterPolicy field restarts does read that field into its pod template, and every field
an operand's transform reads is in a rule for that operand. A new operator version that reads
more fails here, not silently in a plan."""

from __future__ import annotations

import re
import tarfile
from functools import cache

import pytest

from gitops_gpu.preflight import disruption_rules as rules
from gitops_gpu_dev.testbed import operator_build

GO = {  # ClusterPolicy spec key -> the Go field of ClusterPolicySpec
    "toolkit": "Toolkit",
    "devicePlugin": "DevicePlugin",
    "gfd": "GPUFeatureDiscovery",
    "dcgm": "DCGM",
    "dcgmExporter": "DCGMExporter",
    "migManager": "MIGManager",
    "nodeStatusExporter": "NodeStatusExporter",
    "validator": "Validator",
    "cdi": "CDI",
    "mig": "MIG",
    "operator": "Operator",
}
JSON = {go: key for key, go in GO.items()}
TRANSFORM = {
    rules.TOOLKIT: "TransformToolkit",
    rules.PLUGIN: "TransformDevicePlugin",
    rules.GFD: "TransformGPUDiscoveryPlugin",
    rules.DCGM: "TransformDCGM",
    rules.EXPORTER: "TransformDCGMExporter",
    rules.MIG: "TransformMIGManager",
    rules.VALIDATOR: "TransformValidator",
    rules.MPS: "TransformMPSControlDaemon",
    rules.STATUS: "TransformNodeStatusExporter",
}
# Helpers shared by several transforms, each backed by its own rule and checked on its own below
# (validator init containers -> VALIDATED, config manager -> the plugin's image rules).
SHARED = {
    "transformValidationInitContainer",
    "TransformValidatorComponent",
    "handleDevicePluginConfig",
    "transformConfigManagerInitContainer",
    "transformConfigManagerSidecarContainer",
    "configManagerResourceRequirements",
}


@cache
def _source(member: str) -> str:
    """One file of the operator's source (a tarball, or an unpacked checkout)."""
    src = operator_build.source()
    if src.is_dir():
        return (src / member).read_text()
    with tarfile.open(src) as tar:
        for info in tar:
            if info.name.endswith("/" + member) or info.name == member:
                fh = tar.extractfile(info)
                assert fh is not None
                return fh.read().decode()
    raise AssertionError(f"{member} is not in {src}")


@cache
def _functions() -> dict[str, str]:
    text = _source("controllers/object_controls.go")
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r"^func (?:\([^)]*\) )?(\w+)\(.*?\{\n(.*?)^\}", text, re.S | re.M)
    }


def _reads(name: str, skip: frozenset[str], seen: set[str] | None = None) -> set[tuple[str, str]]:
    """(Go field, sub-field or "") the function and what it calls read from ``config``."""
    funcs = _functions()
    seen = set() if seen is None else seen
    if name in seen or name not in funcs or name in skip:
        return set()
    seen.add(name)
    body = funcs[name]
    out = {(m.group(1), m.group(2) or "") for m in re.finditer(r"config\.(\w+)(?:\.(\w+))?", body)}
    for callee in set(re.findall(r"\b(\w+)\(", body)):
        out |= _reads(callee, skip, seen)
    return out


def _operand_reads(operand: str) -> set[tuple[str, str]]:
    skip = frozenset() if operand == rules.VALIDATOR else frozenset(SHARED)
    reads = _reads(TRANSFORM[operand], skip)
    return {(go, sub) for go, sub in reads if go in JSON and sub != "IsEnabled"}


def _calls(name: str, callee: str) -> bool:
    return re.search(rf"\b{callee}\(", _functions()[name]) is not None


def _key(sub: str) -> str:
    return sub[:1].lower() + sub[1:]


@pytest.mark.parametrize("operand", sorted(TRANSFORM))
def test_every_field_an_operand_reads_is_in_a_rule_for_it(operand: str) -> None:
    missing = []
    for go, sub in sorted(_operand_reads(operand)):
        # a whole struct handed on is read for its image path (gpuv1.ImagePath)
        path = (JSON[go], _key(sub) if sub else "repository")
        if operand not in (rules._rule(path) or ()):
            missing.append(f"{go}.{sub}" if sub else go)
    assert not missing, f"{TRANSFORM[operand]} reads {missing}, no rule says it restarts"


def test_every_rule_names_only_operands_that_read_the_field() -> None:
    wrong = []
    for path, operands in rules.TEMPLATE_RULES.items():
        if path[0] not in GO or path[0] == "validator":
            continue  # validator fields: the init-container test below
        for operand in operands:
            reads = _operand_reads(operand) | (
                _reads("transformConfigManagerSidecarContainer", frozenset())
                if operand in (rules.PLUGIN, rules.GFD, rules.MPS)
                else set()
            )
            subs = {sub for go, sub in reads if go == GO[path[0]]}
            wanted = {"", path[1][:1].upper() + path[1][1:]} if len(path) > 1 else None
            if not subs or (wanted is not None and not subs & wanted):
                wrong.append(f"{'.'.join(path)} -> {operand}")
    assert not wrong, f"rules name operands whose transform does not read the field: {wrong}"


def test_validator_init_containers_reach_exactly_the_validated_operands() -> None:
    validated = {o for o, fn in TRANSFORM.items() if _calls(fn, "transformValidationInitContainer")}
    assert validated | {rules.VALIDATOR} == set(rules.VALIDATED)


def test_the_config_manager_runs_in_the_plugin_gfd_and_mps_pods() -> None:
    managed = {o for o, fn in TRANSFORM.items() if _calls(fn, "handleDevicePluginConfig")}
    assert managed == {rules.PLUGIN, rules.GFD, rules.MPS}
    assert ("DevicePlugin", "") in _reads("transformConfigManagerSidecarContainer", frozenset())


def test_common_daemonset_settings_reach_every_operand() -> None:
    assert ("Daemonsets", "Tolerations") in _reads("applyCommonDaemonsetConfig", frozenset())
    assert rules.TEMPLATE_RULES[("daemonsets",)] == rules.EVERY


def test_the_driver_digest_keys_are_the_operators() -> None:
    """INSTALL_KEYS holds every NVIDIADriver spec field buildDriverInstallConfig hashes."""
    text = _source("internal/state/driver.go")
    body = text[text.index("func buildDriverInstallConfig") :]
    body = body[: body.index("\n}\n")]
    fields = set(re.findall(r"data\.Driver\.Spec\.(\w+)", body))
    missing = {_key(f) for f in fields} - rules.INSTALL_KEYS
    assert not missing, f"digest fields not in INSTALL_KEYS: {sorted(missing)}"
    assert "data.GDS" in body and "data.GDRCopy" in body and "data.GPUDirectRDMA" in body
