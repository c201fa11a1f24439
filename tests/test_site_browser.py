"""The built site in a real headless Chromium, served on 127.0.0.1 and kept off the internet."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest
from test_docs import generated_site, site  # noqa: F401  (the session's built sites)

from conftest import REPO
from runbook_runner.runbook import load

webdriver = pytest.importorskip("selenium.webdriver")
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs Debian's chromium and chromium-driver (scripts/test installs them)",
)


def _serve(folder: Path):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


@pytest.fixture(scope="module")
def served(site):  # noqa: F811
    server = _serve(site)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def served_generated(generated_site):  # noqa: F811
    server = _serve(generated_site[0])
    yield f"http://127.0.0.1:{server.server_address[1]}", generated_site[1].stem
    server.shutdown()
    server.server_close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go: $RBR_SCREENSHOTS if set (to look at them), else the test's folder."""
    folder = Path(os.environ.get("RBR_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-quic",
        "--disable-sync",
        "--disable-component-update",
        "--disable-background-networking",
        # Any name but loopback fails to resolve: a page reaching for a CDN breaks the test
        # instead of sending traffic out.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--window-size=1280,1000",
    ]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def wait(driver, condition, timeout=60):  # a loaded machine renders slowly
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def test_postmortem_renders_its_timeline_and_diagram(browser, served, tmp_path: Path):
    from selenium.webdriver.common.by import By

    browser.get(f"{served}/postmortems/sglang-hicache-oom.html")
    tables = browser.find_elements(By.CSS_SELECTOR, "article table")
    assert any("3854" in table.text and "Event" in table.text for table in tables)
    # Material swaps <pre class="mermaid"> for a rendered <div class="mermaid"> once
    # Mermaid (served from the site itself) has drawn it.
    diagram = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "div.mermaid"))[0]
    assert diagram.size["height"] > 100
    assert not browser.find_elements(By.CSS_SELECTOR, "pre.mermaid")
    browser.save_screenshot(str(tmp_path / "postmortem.png"))
    assert (tmp_path / "postmortem.png").stat().st_size > 10_000


def test_search_finds_hicache(browser, served):
    from selenium.webdriver.common.by import By

    browser.get(f"{served}/")
    box = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "input.md-search__input"))
    box.click()  # on a wide window the search box sits in the header
    box.send_keys("hicache")
    results = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "li.md-search-result__item"))
    titles = " ".join(r.text for r in results)
    assert "HiCache" in titles


def test_runbook_page_shows_its_steps(browser, served, tmp_path: Path):
    from selenium.webdriver.common.by import By

    browser.get(f"{served}/runbooks/gpu-oom-recovery.html")
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "article h3")]
    steps = [h for h in headings if h[:1].isdigit()]  # "3. Reset ...": the steps' headings
    assert "When it stops" in " ".join(headings)
    assert any("Reset only the GPUs that still hold memory" in s for s in steps)
    assert len(steps) == len(load(REPO / "runbooks" / "gpu-oom-recovery.yaml").steps)
    danger = browser.find_elements(By.CSS_SELECTOR, "article .admonition.danger")
    runbook = load(REPO / "runbooks" / "gpu-oom-recovery.yaml")
    assert len(danger) == sum(step.destructive for step in runbook.steps)
    browser.save_screenshot(str(tmp_path / "runbook.png"))


def _at_width(browser, width: int, url: str) -> None:
    # Headless Chromium keeps windows at least 500 px wide: emulate the phone's viewport.
    browser.set_window_size(max(width, 800), 1000)
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": width < 600},
    )
    browser.get(url)
    wait(browser, lambda d: d.execute_script("return document.readyState") == "complete")


def _no_page_overflow(browser) -> None:
    """Nothing makes the page itself scroll sideways; wide tables scroll inside their frame."""
    width = browser.execute_script("return document.documentElement.clientWidth")
    scroll = browser.execute_script("return document.documentElement.scrollWidth")
    assert scroll <= width + 1, (scroll, width)


def _full_page(browser, path: Path) -> None:
    import base64

    height = browser.execute_script("return document.documentElement.scrollHeight")
    width = browser.execute_script("return document.documentElement.clientWidth")
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": min(height, 16000), "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert path.stat().st_size > 10_000


@pytest.mark.parametrize("width", [390, 1280])
def test_postmortem_at_phone_and_desktop_width(browser, served, shots, width):
    from selenium.webdriver.common.by import By

    _at_width(browser, width, f"{served}/postmortems/sglang-hicache-oom.html")
    meta = browser.find_elements(By.CSS_SELECTOR, "article table")[0]
    assert "Severity" in meta.get_attribute("textContent")
    assert "Owner" in meta.get_attribute("textContent")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "div.mermaid"))
    _no_page_overflow(browser)
    _full_page(browser, shots / f"postmortem-{width}.png")


@pytest.mark.parametrize("width", [390, 1280])
def test_generated_postmortem_at_phone_and_desktop_width(browser, served_generated, shots, width):
    from selenium.webdriver.common.by import By

    base, stem = served_generated
    _at_width(browser, width, f"{base}/postmortems/{stem}.html")
    article = browser.find_element(By.CSS_SELECTOR, "article").text
    assert "A drill, not an incident" in article
    assert "GPU 0, GPU 2" in article
    chart = browser.find_element(By.CSS_SELECTOR, "article svg.rbr-run-chart")
    assert chart.size["width"] <= width  # scales down to a phone, drawn at any width
    assert chart.size["height"] > 100
    _no_page_overflow(browser)
    _full_page(browser, shots / f"generated-postmortem-{width}.png")


def test_the_ladder_diagram_is_readable_at_desktop_width(browser, served):
    from selenium.webdriver.common.by import By

    _at_width(browser, 1280, f"{served}/pitfalls/orphaned-gpu-memory.html")
    diagram = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "div.mermaid"))[0]
    assert diagram.size["height"] > 300  # top-down: one rung per row


@pytest.mark.parametrize("width", [390, 1280])
def test_links_work_from_file_urls(browser, site, width):  # noqa: F811
    """The built site opened from disk (file://), as on a cluster with no web server: a link
    from the home page to a runbook page, and from there to a pitfall page, each loads."""
    from selenium.webdriver.common.by import By

    _at_width(browser, width, (site / "index.html").as_uri())
    link = browser.find_element(By.CSS_SELECTOR, 'article a[href="runbooks/gpu-oom-recovery.html"]')
    browser.execute_script("arguments[0].click()", link)
    wait(browser, lambda d: d.current_url.endswith("runbooks/gpu-oom-recovery.html"))
    wait(browser, lambda d: d.execute_script("return document.readyState") == "complete")
    assert "GPU" in browser.find_element(By.CSS_SELECTOR, "article h1").text
    more = browser.find_element(
        By.CSS_SELECTOR, 'article a[href="../pitfalls/orphaned-gpu-memory.html"]'
    )
    browser.execute_script("arguments[0].click()", more)
    wait(browser, lambda d: d.current_url.endswith("pitfalls/orphaned-gpu-memory.html"))
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text
    _no_page_overflow(browser)
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.mark.parametrize("width", [390, 1280])
def test_the_sizing_calculator_computes_offline(browser, site, shots, width):  # noqa: F811
    """Opened from disk, with no network: the incident's launch does not fit, and the
    arithmetic is on the page; TP 4 x DP 2 counts eight ranks; --cpu-offload-gb is budgeted
    at 2x; an empty field is refused with a message, not a verdict."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    _at_width(browser, width, (site / "calculator.html").as_uri())
    result = wait(
        browser, lambda d: d.find_element(By.CSS_SELECTOR, "#sizing-sglang output").text or None
    )
    assert "8 ranks × 300 GB = 2,400 GB" in result
    assert "largest --hicache-size that fits: 47 GB per rank" in result
    assert "does NOT fit" in result
    size = browser.find_element(By.CSS_SELECTOR, "#sizing-sglang input[name=hicache_size]")
    size.clear()
    size.send_keys("47")
    wait(
        browser,
        lambda d: "verdict: fits" in d.find_element(By.CSS_SELECTOR, "#sizing-sglang output").text,
    )
    # TP 4 x DP 2: eight ranks, each with its own pool.
    for name, value in (("tp", "4"), ("dp", "2"), ("hicache_size", "90")):
        field = browser.find_element(By.CSS_SELECTOR, f"#sizing-sglang input[name={name}]")
        field.clear()
        field.send_keys(value)
    sglang = wait(
        browser,
        lambda d: (
            "8 ranks × 90 GB = 720 GB"
            in d.find_element(By.CSS_SELECTOR, "#sizing-sglang output").text
            and d.find_element(By.CSS_SELECTOR, "#sizing-sglang output").text
        ),
    )
    assert "does NOT fit" in sglang
    vllm = browser.find_element(By.CSS_SELECTOR, "#sizing-vllm output").text
    assert "2 × --cpu-offload-gb 40 GiB (pinned allocator rounding)" in vllm
    assert "= 640 GiB" in vllm
    assert "largest --cpu-offload-gb that fits: 24 GiB per GPU" in vllm.splitlines()
    tp = browser.find_element(By.CSS_SELECTOR, "#sizing-vllm input[name=tp]")
    tp.clear()
    refused = wait(
        browser,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, "#sizing-vllm output").get_attribute("data-verdict")
            == "refused"
            and d.find_element(By.CSS_SELECTOR, "#sizing-vllm output").text
        ),
    )
    assert "--tensor-parallel-size: enter a number" in refused
    assert "verdict" not in refused
    Select(browser.find_element(By.CSS_SELECTOR, "#sizing-vllm select[name=path]")).select_by_value(
        "simple"
    )
    _no_page_overflow(browser)
    _full_page(browser, shots / f"calculator-{width}.png")


@pytest.mark.parametrize("width", [390, 1280])
def test_the_incident_index_and_the_newcomers_path_from_file_urls(browser, site, shots, width):  # noqa: F811
    """Opened from disk: the incident index draws its tables without widening the page, and a
    newcomer goes home -> pitfall -> an incident it caused -> the drill, one click per step."""
    from selenium.webdriver.common.by import By

    _at_width(browser, width, (site / "incidents" / "index.html").as_uri())
    article = browser.find_element(By.CSS_SELECTOR, "article").text
    assert "Time to recover" in article
    assert "Postmortem: SGLang HiCache OOM" in article
    _no_page_overflow(browser)
    _full_page(browser, shots / f"incident-index-{width}.png")

    def click(selector: str, lands: str) -> None:
        link = browser.find_element(By.CSS_SELECTOR, selector)
        browser.execute_script("arguments[0].click()", link)
        wait(browser, lambda d: d.current_url.split("#")[0].endswith(lands))
        wait(browser, lambda d: d.execute_script("return document.readyState") == "complete")

    _at_width(browser, width, (site / "index.html").as_uri())
    click(
        'article a[href="pitfalls/orphaned-gpu-memory.html"]', "pitfalls/orphaned-gpu-memory.html"
    )
    caused = browser.find_element(By.ID, "the-incidents-it-caused")
    assert caused.text
    click('article a[href*="postmortems/drill-gpu-oom-recovery-oom-crash"]', ".html")
    assert "A drill, not an incident" in browser.find_element(By.CSS_SELECTOR, "article").text
    click('article a[href="../drills.html"]', "drills.html")
    assert "Drills" in browser.find_element(By.CSS_SELECTOR, "article h1").text
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
