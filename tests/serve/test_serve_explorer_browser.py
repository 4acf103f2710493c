"""The explorer in headless Chromium (Debian's ``chromium`` and ``chromium-driver``, which
``.ci/run`` installs), driven through Selenium against the real server: enter a history, switch
a head and the target item, and read back what the page shows against the API's numbers.

The screenshot is saved in the test's folder, and also into ``$ATTNSVM_TEST_ARTIFACTS`` where
that is set (the README's ``docs/explorer.png`` comes from there)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
from serve_helpers import explain_history, headless_chromium, wait_for

HISTORY = ["3", "6", "9", "12", "15", "18"]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    driver = headless_chromium(
        tmp_path_factory.mktemp("chromium-profile"), "--window-size=1400,760"
    )
    yield driver
    driver.quit()


def test_the_explorer_shows_the_apis_recommendations_and_attention(page, server, tmp_path):
    from selenium.webdriver.common.by import By

    body = {"history": HISTORY, "k": 10}
    recommended = httpx.post(f"{server}/recommend", json=body).json()["items"]
    explained = httpx.post(f"{server}/explain", json=body).json()["reading"]

    rows = explain_history(page, server, HISTORY)
    assert [row.get_attribute("data-item") for row in rows] == [
        str(item["item"]) for item in recommended
    ]
    assert [row.find_element(By.CSS_SELECTOR, "td.score").text for row in rows] == [
        f"{item['score']:.4f}" for item in recommended
    ]
    assert rows[0].find_elements(By.TAG_NAME, "td")[2].text == recommended[0]["title"]

    # switch to layer 1, head 1 and to the second recommendation as the scores' target
    heads = page.find_elements(By.CSS_SELECTOR, "#heads button.head")
    assert len(heads) == 4
    page.find_element(By.CSS_SELECTOR, 'button.head[data-layer="1"][data-head="1"]').click()
    page.find_elements(By.CSS_SELECTOR, "#recommendations tbody tr")[1].click()
    table = wait_for(
        page,
        lambda d: (
            (t := d.find_element(By.ID, "tokens")).get_attribute("data-head") == "1"
            and t.get_attribute("data-target") == str(recommended[1]["item"])
            and t
        ),
    )
    head = next(h for h in explained["heads"] if (h["layer"], h["head"]) == (1, 1))
    token_rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(token_rows) == len(HISTORY)
    shown = [float(row.get_attribute("data-attention")) for row in token_rows]
    assert shown == pytest.approx(head["attention"], abs=1e-12)
    assert [row.find_element(By.CSS_SELECTOR, "td.attention").text for row in token_rows] == [
        f"{value:.3f}" for value in head["attention"]
    ]
    counterfactual = head["scores"]["counterfactual"][1]
    assert [row.find_element(By.CSS_SELECTOR, "td.counterfactual").text for row in token_rows] == [
        f"{value:.3f}" for value in counterfactual
    ]
    selected = token_rows[head["selected"]]
    assert "selected" in selected.get_attribute("class")
    assert "selected" in selected.text
    summary = page.find_element(By.ID, "summary").text
    assert f"Layer 1, head 1 selects token {head['selected']}" in summary

    shot = tmp_path / "explorer.png"
    page.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    artifacts = os.environ.get("ATTNSVM_TEST_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / "explorer.png")


def test_the_explorer_reports_a_bad_request_in_words(page, server):
    from selenium.webdriver.common.by import By

    page.get(f"{server}/")
    wait_for(page, lambda d: "sasrec+" in d.find_element(By.ID, "run").text)
    page.find_element(By.ID, "history").send_keys("3 nope")
    page.find_element(By.ID, "explain").click()
    status = page.find_element(By.ID, "status")
    wait_for(page, lambda _: status.get_attribute("class") == "error")
    assert status.text == "history[1]: unknown item id 'nope' (not in the catalogue)"
