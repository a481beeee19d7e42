"""One deployment for the tier (its one module) (deployment.py), users alice and bob on JupyterHub's
single-user extension and carol on its legacy app, and Chromium driven by Playwright.

The tests are plain functions (Playwright's sync API runs its own loop). Each ends with what it
started (notebooks, kernels, jobs) so the next one meets a deployment as a user would.
"""

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.gateway.eg_venv import ensure_eg_venv
from tests.helm.helm_binary import ensure_helm

from .deployment import HubDeployment, describe, start_gateway, stop_gateway

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
USERS = ("alice", "bob", "carol")
LEGACY_USERS = ("carol",)


# Module-scoped, both: the deployment's processes go once the tier is done, and Playwright's
# sync API runs an event loop of its own that must be closed before the asyncio tests that follow.
@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubDeployment]:
    root = tmp_path_factory.mktemp("hub")
    gateway = start_gateway(root, ensure_eg_venv())
    deployment = HubDeployment(root / "jupyterhub", gateway, USERS, LEGACY_USERS)
    try:
        deployment.start(ensure_helm())
        yield deployment
    except BaseException:
        print(describe(deployment.logs() if deployment.hub else {}))
        raise
    finally:
        deployment.stop()
        stop_gateway(gateway, root)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        yield chromium
        chromium.close()


def log_in(browser: Browser, hub: HubDeployment, user: str) -> Page:
    """A fresh browser context logged in to the hub as `user` (the hub's own login form)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(90_000)
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf"{re.escape(hub.url)}/(hub|user)/"))
    return page


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    return tmp_path
