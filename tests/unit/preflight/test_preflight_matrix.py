"""The version-matrix data: every row sourced, consistent, and in step with upstream mig-parted."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gitops_gpu.fleet.models import DriverSettings
from gitops_gpu.fleet.yamlio import parse_single
from gitops_gpu.preflight import compat, matrix
from gitops_gpu_dev import paths

MIG_DEFAULT = paths.shared_upstream() / "mig-parted" / "config-default.yaml"


def test_every_row_has_a_source() -> None:
    m = matrix.load_matrix()
    rows = [*m.architectures, *m.products.values(), *m.branches.values()]
    assert rows and all(str(r.get("source", "")).strip() for r in rows)
    assert m.auto_source
    assert all(r.get("basis") and r.get("line") for r in m.mig_profiles.values())


@pytest.mark.parametrize("name", ["version_matrix.yaml", "mig_profiles.yaml"])
def test_data_files_read_the_same_as_yaml_1_2(name: str) -> None:
    # libyaml reads YAML 1.1: a `yes`, `on` or `0755` in a data file would change meaning
    text = (Path(matrix.__file__).resolve().parents[1] / "data" / name).read_text()
    assert matrix.load_data_text(text) == YAML(typ="safe", pure=True).load(text)
    assert matrix.load_data_text("a: yes\n") != YAML(typ="safe", pure=True).load("a: yes\n")


def test_products_reference_known_architectures_and_mig_models() -> None:
    m = matrix.load_matrix()
    archs = {a["name"] for a in m.architectures}
    models = {model for r in m.mig_profiles.values() for model in r["models"]} - {"*"}
    for row in m.products.values():
        assert row["architecture"] in archs, row["product"]
        assert row.get("mig_model") is None or row["mig_model"] in models, row["product"]


def test_mig_catalogue_matches_upstream_config_default() -> None:
    upstream = parse_single("config-default.yaml", MIG_DEFAULT.read_text())
    profiles = upstream.data["mig-configs"]
    ours = matrix.load_matrix().mig_profiles
    assert sorted(ours) == sorted(profiles)
    for name, row in ours.items():
        assert row["line"] == upstream.positions[("mig-configs", name)][0], name
    # profiles with device filters: our models are exactly the filtered devices' models
    data = parse_single(
        "m", (Path(matrix.__file__).parents[1] / "data" / "mig_profiles.yaml").read_text()
    ).data
    by_id = {i.lower(): model for model, v in data["models"].items() for i in v["pci_device_ids"]}
    for name, entries in profiles.items():
        filters = [e["device-filter"] for e in entries if "device-filter" in e]
        if filters:
            ids = [i for f in filters for i in ([f] if isinstance(f, str) else f)]
            assert sorted(ours[name]["models"]) == sorted({by_id[i.lower()] for i in ids}), name


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("580.126.20", (580, 126, 20)),
        ("580", (580,)),
        ("v570.86", (570, 86)),
        ("sha256:abc", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_version(text: str | None, parsed: tuple[int, ...] | None) -> None:
    assert matrix.parse_version(text) == parsed


@pytest.mark.parametrize(
    ("compute", "arch"),
    [
        ((3, 7), "kepler"),
        ((5, 2), "maxwell"),
        ((6, 1), "pascal"),
        ((7, 0), "volta"),
        ((7, 5), "turing"),
        ((8, 6), "ampere"),
        ((8, 9), "ada-lovelace"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((2, 0), None),
    ],
)
def test_architecture_from_compute_capability(compute: tuple[int, int], arch: str | None) -> None:
    assert matrix.arch_of_compute(*compute) == arch


def test_gfd_product_suffixes_are_normalised() -> None:
    assert matrix.normalise_product("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb") == "NVIDIA-H100-80GB-HBM3"
    assert matrix.normalise_product("NVIDIA-L40S-SHARED") == "NVIDIA-L40S"


def test_unknown_product_falls_back_to_gfd_compute_labels() -> None:
    facts = matrix.facts_for(
        "NVIDIA-Future-GPU",
        "node n",
        {"nvidia.com/gpu.compute.major": "12", "nvidia.com/gpu.compute.minor": "0"},
    )
    assert facts.architecture == "blackwell" and facts.open_required
    issues = matrix.check_driver(
        DriverSettings(version="580.126.20", kernel_module_type="proprietary"),
        [facts],
        datetime.date(2026, 1, 1),
    )
    assert [i.code for i in issues] == ["GG031"]


def test_eol_depends_on_the_date() -> None:
    gpu = matrix.facts_for("NVIDIA-L40S", "pool.yaml")
    drv = DriverSettings(version="535.247.01", kernel_module_type="proprietary")
    assert matrix.check_driver(drv, [gpu], datetime.date(2026, 6, 29)) == []
    (issue,) = matrix.check_driver(drv, [gpu], datetime.date(2026, 6, 30))
    assert issue.code == "GG035"


def test_branch_only_version_skips_patch_level_rules() -> None:
    # precompiled drivers pin a branch ("580"): the B200 patch-level minimum cannot be judged
    gpu = matrix.facts_for("NVIDIA-B200", "pool.yaml")
    assert (
        matrix.check_driver(DriverSettings(version="580"), [gpu], datetime.date(2026, 1, 1)) == []
    )


# -- issue 16: the matrix complete for what it claims -----------------------------------------

VALUES_HISTORY = paths.shared_upstream() / "gpu-operator" / "samples" / "values-history"


def test_every_architecture_after_volta_has_a_first_branch() -> None:
    for arch in matrix.load_matrix().architectures:
        if arch.get("last_branch") is None:  # still supported: where support starts is known
            assert arch.get("min_branch"), arch["name"]


def test_new_sections_keep_their_source() -> None:
    m = matrix.load_matrix()
    rows = [*m.cuda.values(), *m.operator_releases.values()]
    assert len(m.cuda) >= 3 and len(m.operator_releases) >= 3
    assert all(str(r.get("source", "")).strip() for r in rows)


@pytest.mark.parametrize("release", ["v25.10.1", "v26.3.3", "v26.7.0"])
def test_operator_release_defaults_match_upstream_values(release: str, upstream: Path) -> None:
    values = parse_single("values.yaml", (VALUES_HISTORY / f"values-{release}.yaml").read_text())
    row = matrix.load_matrix().operator_releases[release]
    assert str(row["default_driver"]) == values.data["driver"]["version"]
    assert f"values-{release}.yaml" in row["source"]


@pytest.mark.parametrize(
    ("product", "version", "first"),
    [
        ("NVIDIA-H100-80GB-HBM3", "470.141.10", "R515"),  # the issue's case: R470 on Hopper
        ("NVIDIA-A100-SXM4-40GB", "440.118.02", "R450"),
        ("NVIDIA-L40S", "515.105.01", "R520"),
        ("Tesla-T4", "396.82", "R410"),
    ],
)
def test_a_branch_that_predates_the_gpu_is_an_error(product: str, version: str, first: str) -> None:
    gpu = matrix.facts_for(product, "pool.yaml")
    issues = matrix.check_driver(
        DriverSettings(version=version, kernel_module_type="proprietary"),
        [gpu],
        datetime.date(2026, 11, 1),
    )
    (issue,) = [i for i in issues if i.code == "GG030"]
    assert f"{first} is the first branch" in issue.message and issue.source


def test_the_first_supported_branch_passes() -> None:
    gpu = matrix.facts_for("NVIDIA-H100-80GB-HBM3", "pool.yaml")
    issues = matrix.check_driver(
        DriverSettings(version="580.126.20", kernel_module_type="open"),
        [gpu],
        datetime.date(2026, 11, 1),
    )
    assert issues == []


def test_r570_is_end_of_life_from_march_2026() -> None:
    d = DriverSettings(version="570.195.03", kernel_module_type="open")
    gpu = [matrix.facts_for("NVIDIA-H100-80GB-HBM3", "pool.yaml")]
    assert not matrix.check_driver(d, gpu, datetime.date(2026, 2, 27))
    (eol,) = matrix.check_driver(d, gpu, datetime.date(2026, 3, 1))
    assert eol.code == "GG035" and "supported-drivers" in eol.source


@pytest.mark.parametrize(
    ("cuda", "driver", "needle"),
    [
        ("13.0", "570.195.03", "needs driver >= 580"),
        ("12.8", "470.141.10", "needs driver >= 525.60.13"),
        ("12.2", "525.60.12", "needs driver >= 525.60.13"),
    ],
)
def test_cuda_the_driver_cannot_run(cuda: str, driver: str, needle: str) -> None:
    (issue,) = compat.check_cuda(cuda, driver)
    assert issue.code == "GG037" and needle in issue.message and issue.source


@pytest.mark.parametrize(("cuda", "driver"), [("13.0", "580.65.06"), ("12.8", "535.247.01")])
def test_cuda_the_driver_runs(cuda: str, driver: str) -> None:
    assert compat.check_cuda(cuda, driver) == []


def test_cuda_unknown_to_the_matrix_is_a_note() -> None:
    (issue,) = compat.check_cuda("14.0", "595.91.07")
    assert issue.code == "GG036"


def test_driver_newer_than_the_operator_release() -> None:
    (issue,) = compat.check_operator("v25.10.1", "595.91.07")
    assert issue.code == "GG038" and "580.105.08" in issue.message
    assert "values-v25.10.1.yaml" in issue.source
    assert compat.check_operator("v26.7.0", "595.91.07") == []
    assert compat.check_operator("26.3.3", "580.65.06") == []  # older active branch: fine


def test_unknown_operator_release_is_a_note() -> None:
    (issue,) = compat.check_operator("v19.1.0", "580.126.20")
    assert issue.code == "GG036" and "v25.10.1" in issue.message


@pytest.mark.parametrize(
    ("product", "driver"),
    [
        ("Tesla-V100-SXM2-16GB", DriverSettings(version="595.91.07", kernel_module_type="open")),
        ("NVIDIA-B200", DriverSettings(version="570.124.06", kernel_module_type="proprietary")),
        ("NVIDIA-GH200-480GB", DriverSettings(version="550.54.15", kernel_module_type="auto")),
    ],
)
def test_every_matrix_issue_carries_its_source(product: str, driver: DriverSettings) -> None:
    gpus = [matrix.facts_for(product, "pool.yaml")]
    issues = matrix.check_driver(driver, gpus, datetime.date(2026, 11, 1))
    issues += matrix.check_mig("all-1g.5gb", gpus, "")
    assert len({i.code for i in issues}) >= 2
    for issue in issues:
        assert issue.source, issue


def test_mig_device_profiles_are_those_of_the_catalogue_layouts() -> None:
    """Per model, every device profile a catalogue layout places and the most it places on one
    GPU: derived here from upstream's layouts, independently of the data file."""
    layouts = parse_single("config-default.yaml", MIG_DEFAULT.read_text()).data["mig-configs"]
    m = matrix.load_matrix()
    by_id = {
        i.lower(): model
        for model, ids in (
            (name, row["pci_device_ids"])
            for name, row in parse_single(
                "m", (Path(matrix.__file__).parents[1] / "data" / "mig_profiles.yaml").read_text()
            )
            .data["models"]
            .items()
        )
        for i in ids
    }
    want: dict[str, dict[str, int]] = {}
    for name, entries in layouts.items():
        for entry in entries:
            found = entry.get("device-filter")
            if found:
                ids = [found] if isinstance(found, str) else found
                models = {by_id[i.lower()] for i in ids if i.lower() in by_id}
            else:
                models = {x for x in m.mig_profiles[name]["models"] if x != "*"}
            for model in models:
                for device, count in (entry.get("mig-devices") or {}).items():
                    have = want.setdefault(model, {})
                    have[device] = max(have.get(device, 0), int(count))
    assert m.mig_devices == want
    assert m.mig_devices["H100-80GB"]["1g.10gb"] == 7 and m.mig_devices["A30-24GB"]["1g.6gb"] == 4
