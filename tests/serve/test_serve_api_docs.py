"""``/docs`` and ``/redoc`` on a host without network: every file the pages load is the server's
own, and Swagger UI renders the API in a headless Chromium that can reach nothing else."""

from __future__ import annotations

import re

import httpx
import pytest
from serve_helpers import headless_chromium, wait_for

#: every URL a page loads: src=, href= and the schema's url in Swagger UI's and ReDoc's calls
LOADED = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*["']([^"']+)["']""")
REDOC_SPEC = re.compile(r"""<redoc\s+spec-url=["']([^"']+)["']""")


def loaded_urls(html: str) -> list[str]:
    found = [a or b for a, b in LOADED.findall(html)] + REDOC_SPEC.findall(html)
    assert found, "the page loads nothing: the pattern no longer matches FastAPI's page"
    return found


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_docs_load_only_the_servers_own_files(server, page):
    answer = httpx.get(f"{server}{page}")
    assert answer.status_code == 200
    for url in loaded_urls(answer.text):
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url}"
        asset = httpx.get(f"{server}{url}")
        assert asset.status_code == 200, url
        assert len(asset.content) > 0, url
    assert "fonts.googleapis" not in answer.text


def test_swagger_ui_renders_the_api_with_the_network_off(server, tmp_path):
    # the network off: every request goes to a proxy that is not there, but loopback (the
    # server), which Chromium never sends through a proxy
    driver = headless_chromium(tmp_path / "profile", "--proxy-server=http://127.0.0.1:9")
    from selenium.webdriver.common.by import By

    try:
        driver.get(f"{server}/docs")
        routes = wait_for(
            driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
        )
        paths = {route.text.strip() for route in routes}
        assert {"/recommend", "/similar", "/health"} <= paths
        title = driver.find_element(By.CSS_SELECTOR, ".info .title").text
        assert title.startswith("attnsvm recommender")
        fetched = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        assert fetched and all(url.startswith(server) for url in fetched), fetched
    finally:
        driver.quit()
