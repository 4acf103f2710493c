"""Helpers of the server tests: the tiny walks data with titles, starting a real server, and
headless Chromium driving the explorer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from tests import walks
from tests.walks import NUM_ITEMS

from attnsvm.serve.server import free_port


def write_walks(folder: Path, num_users: int = 120, seed: int = 0) -> Path:
    """``tests.walks``' walks in ``folder/walks.txt``, with a ``movies.dat`` of titles beside
    them, where ``find_titles`` looks."""
    titles = "".join(f"{i}::Film number {i} ({1970 + i})::Drama\n" for i in range(1, NUM_ITEMS + 1))
    (folder / "movies.dat").write_text(titles)
    return walks.write_walks(folder / "walks.txt", num_users, seed)


def start_server(run_dir: Path, *options: str) -> tuple[subprocess.Popen, str]:
    """``attnsvm serve RUN_DIR`` on a free loopback port; returns once ``/health`` answers."""
    port = free_port()
    command = [sys.executable, "-m", "attnsvm.cli.main", "serve", str(run_dir)]
    command += ["--port", str(port), "--threads", "1", *options]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {process.stdout.read()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the server did not answer /health within 120 s")


def headless_chromium(profile: Path, *flags: str):
    """A Selenium driver of headless Chromium with its own profile folder and ``flags`` added;
    skips the test where Debian's ``chromium`` and ``chromium-driver`` (or Selenium) are not
    installed (``.ci/run`` installs them)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if browser is None or driver_path is None:
        pytest.skip("chromium and chromium-driver are not installed (apt-get install -y chromium)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *flags,
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    return driver


def wait_for(driver, condition, seconds: float = 30):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds).until(lambda d: condition(d))


def explain_history(page, server: str, history: list[str]) -> list:
    """Open the explorer, enter ``history``, press Explain; the 10 recommendation rows."""
    from selenium.webdriver.common.by import By

    page.get(f"{server}/")
    wait_for(page, lambda d: "sasrec+" in d.find_element(By.ID, "run").text)
    page.find_element(By.ID, "history").send_keys(" ".join(history))
    page.find_element(By.ID, "explain").click()
    return wait_for(
        page,
        lambda d: (
            len(rows := d.find_elements(By.CSS_SELECTOR, "#recommendations tbody tr")) == 10
            and rows
        ),
    )
