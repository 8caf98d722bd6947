"""scim2-tester, a third-party RFC 7643/7644 compliance checker, run through scim2-cli against the
live endpoint: discovery, an unknown URL, then for Users and Groups create, read, list and
`/.search` with `attributes`/`excludedAttributes`, replace, PATCH add, remove and replace of every
attribute, and delete. scim2-cli counts a skipped check as a failure, so everything it checks
must pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gateway.dev.embedded_redis import EmbeddedRedis
from tests.conftest import GatewayFactory
from tests.scim.conftest import TOKEN

SCIM2 = str(Path(sys.executable).with_name("scim2"))


def test_scim2_tester_passes_against_the_live_endpoint(make_gateway: GatewayFactory) -> None:
    # A Redis of its own: the checker expects what it created on the first page of each listing.
    with EmbeddedRedis() as redis, make_gateway(redis_url=redis.url, scim_token=TOKEN) as gw:
        gw.secrets_created.append(TOKEN)
        # The token by environment (scim2-cli's SCIM_CLI_HEADERS), never on a command line.
        env = {**os.environ, "SCIM_CLI_HEADERS": f"Authorization: Bearer {TOKEN}"}
        done = subprocess.run(
            [SCIM2, "-u", f"{gw.url}/scim/v2", "test"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    out = done.stdout + done.stderr
    results = [line.split()[0] for line in out.splitlines() if line[:1].isupper() and " " in line]
    assert done.returncode == 0, out[-6000:]
    assert set(results) == {"Performing", "SUCCESS"}, out[-6000:]
    assert results.count("SUCCESS") > 100, out[-3000:]  # every check ran: discovery and CRUD of both types
