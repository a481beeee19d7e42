"""One user cannot start a kernel as another, nor see or reach another user's kernels."""

import json
import time
import urllib.error
import urllib.request

import pytest
from tornado import httpclient, websocket

from .conftest import KERNEL_NAME, Gateways, execute, http, pid_alive, user_token

pytestmark = pytest.mark.integration

ALICE, BOB = user_token("alice"), user_token("bob")


async def test_the_front_overwrites_a_forged_username_and_drops_pod_steering_variables(
    gateways: Gateways,
) -> None:
    front = gateways.start("a").url
    forged = {
        "KERNEL_USERNAME": "bob",
        "KERNEL_NAMESPACE": "kube-system",
        "KERNEL_UID": "0",
        "KERNEL_VOLUMES": "[{name: host, hostPath: {path: /}}]",
        "DISTRUN_URL": "http://notebook.example/user/alice/",
    }
    status, kernel = http(
        f"{front}/api/kernels", "POST", {"name": KERNEL_NAME, "env": forged}, ALICE
    )
    assert status == 201, kernel

    stdout, errors = await execute(
        f"{front.replace('http', 'ws')}/api/kernels/{kernel['id']}/channels",
        ALICE,
        "import os; print(os.environ['KERNEL_USERNAME'], os.environ['KERNEL_NAMESPACE'],"
        " 'KERNEL_UID' in os.environ, 'KERNEL_VOLUMES' in os.environ, os.environ['DISTRUN_URL'])",
    )

    assert errors == []
    assert stdout.split() == [
        "alice", "kernels-alice", "False", "False", "http://notebook.example/user/alice/"
    ]  # fmt: skip


async def test_another_user_can_neither_list_nor_reach_nor_delete_the_kernel(
    gateways: Gateways,
) -> None:
    front = gateways.start("a").url
    status, kernel = http(f"{front}/api/kernels", "POST", {"name": KERNEL_NAME}, ALICE)
    assert status == 201, kernel
    kernel_url = f"{front}/api/kernels/{kernel['id']}"
    stdout, _ = await execute(kernel_url.replace("http", "ws") + "/channels", ALICE,
                              "import os; print(os.getpid())")  # fmt: skip
    pid = int(stdout)

    assert http(f"{front}/api/kernels", token=BOB) == (200, [])
    assert http(kernel_url, token=BOB)[0] == 404
    assert http(kernel_url + "/interrupt", "POST", {}, BOB)[0] == 404
    assert http(kernel_url, "DELETE", token=BOB)[0] == 404
    with pytest.raises(httpclient.HTTPClientError) as refused:
        await execute(kernel_url.replace("http", "ws") + "/channels", BOB, "print(1)")
    assert refused.value.code == 404

    assert pid_alive(pid)
    assert [k["id"] for k in http(f"{front}/api/kernels", token=ALICE)[1]] == [kernel["id"]]


async def test_an_owner_record_written_to_the_shared_volume_without_the_key_gives_nothing(
    gateways: Gateways,
) -> None:
    """bob reaches the volume the replicas share (a pod mounting its export) and names himself
    the owner of alice's kernel: the front trusts only records signed with its key, so bob gets
    a 404 and alice, whose record no longer verifies either, is not handed to bob."""
    replica = gateways.start("a")
    front = replica.url
    status, kernel = http(f"{front}/api/kernels", "POST", {"name": KERNEL_NAME}, ALICE)
    assert status == 201, kernel
    record = replica.state / "owners" / kernel["id"]
    signed_for_alice = record.read_text()
    assert signed_for_alice.startswith("alice\n"), "the record says its owner"

    record.write_text("bob")  # the old, unsigned form
    assert http(f"{front}/api/kernels/{kernel['id']}", token=BOB)[0] == 404
    assert http(f"{front}/api/kernels", token=BOB) == (200, [])
    record.write_text("bob\n" + signed_for_alice.rpartition("\n")[2])  # alice's signature
    assert http(f"{front}/api/kernels/{kernel['id']}", token=BOB)[0] == 404
    record.write_text("bob\n" + "0" * 64)  # a forged signature
    assert http(f"{front}/api/kernels/{kernel['id']}", "DELETE", token=BOB)[0] == 404
    assert http(f"{front}/api/kernels/{kernel['id']}", token=ALICE)[0] == 404

    record.write_text(signed_for_alice)  # put back as it was
    assert http(f"{front}/api/kernels/{kernel['id']}", token=ALICE)[0] == 200
    assert http(f"{front}/api/kernels/{kernel['id']}", "DELETE", token=ALICE)[0] == 204


@pytest.mark.parametrize(
    "token",
    [
        None,
        "",
        "not-a-token",
        BOB.rsplit(".", 1)[0] + ".alice",
        user_token("alice") + "x",
        "a" * 64 + ".alice",  # the old unversioned form
    ],
    ids=["none", "empty", "garbage", "bobs-signature-alices-name", "tampered", "v1-form"],
)
def test_requests_without_a_valid_user_token_are_refused(
    gateways: Gateways, token: str | None
) -> None:
    front = gateways.start("a").url
    for path, method in [("/api/kernels", "GET"), ("/api/kernels", "POST"), ("/api", "GET"),
                         ("/api/kernelspecs", "GET")]:  # fmt: skip
        status, body = http(front + path, method, {"name": KERNEL_NAME}, token)
        assert status == 401, (path, body)
        assert body == {"message": "a valid distrun gateway token is required"}


def test_unknown_kernel_names_and_other_endpoints_get_a_message_not_a_traceback(
    gateways: Gateways,
) -> None:
    front = gateways.start("a").url
    status, body = http(f"{front}/api/kernels", "POST", {"name": "python_nope"}, ALICE)
    assert status == 404
    assert body == {"message": "no kernel named 'python_nope'; available: python_distrun"}
    assert http(f"{front}/api/swagger.yaml", token=ALICE) == (404, {"message": "not found"})
    assert http(f"{front}/api/sessions", token=ALICE) == (404, {"message": "not found"})
    status, specs = http(f"{front}/api/kernelspecs", token=ALICE)
    assert status == 200 and set(specs["kernelspecs"]) == {KERNEL_NAME}


async def test_the_gateway_itself_refuses_callers_without_its_own_token(gateways: Gateways) -> None:
    replica = gateways.start("a")
    assert http(f"{replica.eg_url}/api/kernels", token=ALICE)[0] == 401
    with pytest.raises((httpclient.HTTPClientError, websocket.WebSocketError, OSError)):
        await execute(f"ws://127.0.0.1:{replica.eg_port}/api/kernels/x/channels", ALICE, "1")


def test_non_ascii_authorization_expired_and_revoked_tokens_are_a_401_in_words(
    gateways: Gateways,
) -> None:
    replica = gateways.start("a")
    front = replica.url
    for header in ["token ali\u00e9e", "token \u00ff" * 3, "Bearer v2.1.0." + "\u00e9" * 64 + ".a"]:
        request = urllib.request.Request(f"{front}/api/kernels")
        request.add_header("Authorization", header)  # sent as latin-1, as a browser could
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 401
        assert json.loads(refused.value.read())["message"].startswith("a valid distrun")

    expiring = user_token("alice", lifetime=2)
    assert http(f"{front}/api/kernels", token=expiring)[0] == 200
    time.sleep(2.5)
    status, body = http(f"{front}/api/kernels", token=expiring)
    assert status == 401
    assert body["message"] == "this gateway token has expired; restart your server from the hub"

    alice, bob = user_token("alice"), user_token("bob")
    assert http(f"{front}/api/kernels", token=alice)[0] == 200
    replica.revoke("alice")
    status, body = http(f"{front}/api/kernels", token=alice)
    assert status == 401 and "revoked" in body["message"]
    assert http(f"{front}/api/kernels", token=bob)[0] == 200  # one user's revocation only
    time.sleep(1.1)
    assert http(f"{front}/api/kernels", token=user_token("alice"))[0] == 200  # a new token works
