"""The controller's ledger on the real apiserver: it persists, it ignores what it did not seal,
and two writers (a controller and `accept-history`) never lose each other's change."""

from __future__ import annotations

import json
import time
from typing import Any

from gitops_gpu import ledger as ledger_module
from gitops_gpu.kube import Client
from gitops_gpu.ledger import Ledger, ledger_name
from gitops_gpu.rollout.seal import Keyring, generate, parse_public_keys
from gitops_gpu.rollout.status import CommitStatus, stage_context
from gitops_gpu.sync.live import Informer
from gitops_gpu_dev.testbed.session import Testbed

KEY = generate("controller")
RING = Keyring(parse_public_keys(KEY.public_line(), "controller.pub"))
SHA, OTHER = "a" * 40, "b" * 40


def verdict(sha: str, text: str = "canary: passed") -> CommitStatus:
    return KEY.seal(CommitStatus(sha, stage_context("canary"), "success", text, "", 1_780_000_000))


def test_verdicts_first_seen_and_head_persist_and_are_bounded(clean_cluster: Testbed) -> None:
    client = clean_cluster.client
    ledger = Ledger(client, "default", "a", keys=RING)
    assert ledger.record_verdict(verdict(SHA))
    assert not ledger.record_verdict(verdict(SHA))  # the same verdict again: no write
    assert ledger.first_seen([SHA, OTHER], 100.0) == {SHA: 100.0, OTHER: 100.0}
    assert ledger.first_seen([SHA], 999.0)[SHA] == 100.0  # first seen stays first
    ledger.admit(SHA)
    ledger.set_head(OTHER)
    again = Ledger(client, "default", "a", keys=RING)
    data = again.refresh(force=True)
    assert [v.sha for v in data.verdicts] == [SHA] and RING.check(data.verdicts[0]).signer
    assert data.seen == {SHA: 100.0, OTHER: 100.0}
    assert data.admitted == {SHA} and data.head == OTHER
    again.forget_except({OTHER})
    fresh = Ledger(client, "default", "a", keys=RING).refresh(force=True)
    assert fresh.verdicts == [] and fresh.seen == {OTHER: 100.0} and fresh.admitted == set()
    assert client.get("v1", "ConfigMap", ledger_name("a"), "default") is not None


def test_a_verdict_someone_else_wrote_into_the_configmap_is_dropped(
    clean_cluster: Testbed,
) -> None:
    client = clean_cluster.client
    Ledger(client, "default", keys=RING).record_verdict(verdict(SHA))
    cm: Any = client.get("v1", "ConfigMap", ledger_name(None), "default")
    forged = {"sha": OTHER, "context": stage_context("fleet"), "state": "success", "seal": ""}
    foreign = generate("intruder").seal(CommitStatus(OTHER, stage_context("fleet"), "success"))
    lines = cm["data"]["verdicts"] + json.dumps(forged) + "\n"
    lines += json.dumps({**forged, "seal": foreign.seal}) + "\nnot json\n"
    client.patch(
        "v1", "ConfigMap", ledger_name(None), {"data": {"verdicts": lines}}, namespace="default"
    )
    data = Ledger(client, "default", keys=RING).refresh(force=True)
    assert [(v.sha, v.context) for v in data.verdicts] == [(SHA, stage_context("canary"))]


def test_two_writers_keep_both_changes(clean_cluster: Testbed) -> None:
    client = clean_cluster.client
    controller = Ledger(client, "default", keys=RING)
    person = Ledger(client, "default", keys=RING)
    controller.set_head(SHA)
    person.refresh(force=True)
    controller.record_verdict(verdict(SHA))  # the person's copy is stale now
    accepted = person.accept(OTHER, "alice", 5.0)  # a conflict: re-read, then applied again
    assert accepted.previous == SHA
    data = Ledger(client, "default", keys=RING).refresh(force=True)
    assert [v.sha for v in data.verdicts] == [SHA]
    assert [(a.sha, a.by, a.previous) for a in data.accepted] == [(OTHER, "alice", SHA)]
    assert person.writes == 1 and controller.writes == 2


class _Frozen:
    """A watch that stopped at one version of the ConfigMap: it trails the ledger's writes."""

    def __init__(self, obj: Any) -> None:
        self.obj, self.synced = obj, True

    def get(self, name: str) -> Any:
        return self.obj


def _configmap_gets(client: Client) -> int:
    """GETs of one ConfigMap by name (the informer's LIST is a GET of the collection)."""
    return sum(
        n for k, n in client.requests.items() if k.startswith("GET ") and "/configmaps/" in k
    )


def test_a_watched_ledger_reads_what_others_write_from_its_watch_not_with_gets(
    clean_cluster: Testbed,
) -> None:
    writer = Ledger(clean_cluster.client, "default", "w", keys=RING)
    writer.set_head(SHA)
    client = Client.from_kubeconfig(clean_cluster.kubeconfig)
    watch = Informer(
        client,
        "v1",
        "ConfigMap",
        namespace="default",
        field_selector=f"metadata.name={ledger_name('w')}",
        coalesce=0.0,
    )
    watch.start()
    now = [0.0]
    try:
        watch.wait_synced()
        ledger = Ledger(client, "default", "w", keys=RING, watch=watch, clock=lambda: now[0])
        assert ledger.refresh().head == SHA
        writer.record_verdict(verdict(OTHER))  # another writer: news the watch brings
        deadline = time.monotonic() + 15
        while [v.sha for v in ledger.refresh().verdicts] != [OTHER]:
            assert time.monotonic() < deadline, "the watch never brought the other writer's verdict"
            now[0] += ledger_module.REREAD_SECONDS  # a GET would be due on the timer alone
            time.sleep(0.05)
        assert _configmap_gets(client) == 0
        # Our own write, then a watch still showing the version before it: no step back.
        before = watch.get(ledger_name("w"))
        ledger.admit(SHA)
        ledger._watch = _Frozen(before)
        assert ledger.refresh().admitted == {SHA} and _configmap_gets(client) == 0
        # A watch that shows the ConfigMap gone while we hold one: a GET settles it.
        ledger._watch = _Frozen(None)
        assert ledger.refresh().admitted == {SHA} and _configmap_gets(client) == 1
    finally:
        watch.stop()
        client.close()
