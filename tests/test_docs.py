"""The documentation site: it builds with ``mkdocs build --strict``, every script has its page with every flag and
every logged tag, and every page opens in headless Chromium without a console error, an image that did not load,
a link to a page or anchor that does not exist, or a resource fetched from another host.

The browser test needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install chromium chromium-driver``);
without them it is skipped, unless ``CLEANRL_REQUIRE_BROWSER=1`` (CI) makes that a failure. With
``DOCS_SCREENSHOTS=<dir>`` it saves a full-page PNG of every page there. ``CLEANRL_DOCS_ROOT=<dir>`` tests the site
of another copy of the repository (tests/docs_contract.py).
"""

import base64
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from filelock import FileLock

from tests.docs_contract import ROOT, SCRIPTS, help_flags, help_texts, nav_pages, on_page, script_tags


def _shared_dir(tmp_path_factory) -> Path:
    """A folder of this test run that the xdist workers share: the site is built and the scripts' help read once."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The site built by ``mkdocs build --strict`` into a temporary folder; the build's failure fails the tests
    that need the site, with mkdocs's output."""
    shared = _shared_dir(tmp_path_factory)
    site_dir, result = shared / "docs-site", shared / "docs-site.json"
    with FileLock(str(result) + ".lock"):
        if not result.exists():
            command = [
                sys.executable,
                "-m",
                "mkdocs",
                "build",
                "--strict",
                "-f",
                str(ROOT / "mkdocs.yml"),
                "-d",
                str(site_dir),
            ]
            env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about MkDocs 2.0
            out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            result.write_text(json.dumps({"returncode": out.returncode, "output": out.stdout + out.stderr}))
        built = json.loads(result.read_text())
    assert built["returncode"] == 0, f"mkdocs build --strict failed:\n{built['output'][-6000:]}"
    return site_dir


@pytest.fixture(scope="session")
def helps(tmp_path_factory) -> dict[str, str]:
    shared = _shared_dir(tmp_path_factory)
    cache = shared / "docs-help.json"
    with FileLock(str(cache) + ".lock"):
        if not cache.exists():
            cache.write_text(json.dumps(help_texts(SCRIPTS)))
        return json.loads(cache.read_text())


def test_site_builds_strictly(site):
    assert (site / "index.html").is_file()


class _Assets(html.parser.HTMLParser):
    """The ids and the loaded assets (``src`` of any tag, ``href`` of ``<link>``) of one HTML page."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.assets: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(name):
                self.ids.add(attrs[name])
        if attrs.get("src"):
            self.assets.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            self.assets.append(attrs["href"])


def _parse(path: Path) -> _Assets:
    parser = _Assets()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


REMOTE_CSS = re.compile(r"""(?:url\(|@import)\s*['"]?(?:https?:)?//[^'")\s]*""")


def test_site_loads_nothing_from_another_host(site):
    """Offline: no page loads a script, style sheet, font or image from a URL, and no style sheet imports one."""
    remote = []
    for page in sorted(site.rglob("*.html")):
        remote += [f"{page.relative_to(site)}: {url}" for url in _parse(page).assets if "://" in url or url.startswith("//")]
    for sheet in sorted(site.rglob("*.css")):
        text = sheet.read_text(encoding="utf-8", errors="replace")
        remote += [f"{sheet.relative_to(site)}: {found}" for found in REMOTE_CSS.findall(text)]
    assert not remote, "the site fetches from the network:\n" + "\n".join(remote)


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    nav = nav_pages()
    docs = ROOT / "docs"
    missing = [page for page in nav if not (docs / page).is_file()]
    left_out = sorted(str(p.relative_to(docs)) for p in docs.rglob("*.md") if str(p.relative_to(docs)) not in nav)
    assert not missing and not left_out, f"in the nav but not in docs/: {missing}; in docs/ but not in the nav: {left_out}"


@pytest.mark.parametrize("stem", SCRIPTS)
def test_script_has_a_page_in_the_nav(stem):
    page = f"scripts/{stem}.md"
    assert (ROOT / "docs" / page).is_file(), f"cleanrl/{stem}.py has no page docs/{page}"
    assert page in nav_pages(), f"docs/{page} is not in mkdocs.yml's nav"


def _page(stem: str) -> str:
    path = ROOT / "docs" / "scripts" / f"{stem}.md"
    if not path.is_file():
        pytest.fail(f"cleanrl/{stem}.py has no page docs/scripts/{stem}.md")
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("stem", SCRIPTS)
def test_script_page_lists_every_flag(stem, helps):
    assert not helps[stem].startswith("ERROR"), helps[stem]
    flags = help_flags(helps[stem])
    assert len(flags) > 10, f"read too few flags from cleanrl/{stem}.py --help: {flags}"
    missing = [flag for flag in flags if not on_page(flag, _page(stem))]
    assert not missing, f"docs/scripts/{stem}.md lacks these flags of `python cleanrl/{stem}.py --help`: {', '.join(missing)}"


@pytest.mark.parametrize("stem", SCRIPTS)
def test_script_page_lists_every_logged_tag(stem):
    tags = script_tags(stem)
    assert "charts/SPS" in tags, f"read no charts/SPS from cleanrl/{stem}.py: {tags}"
    missing = [tag.replace("\0", "<...>") for tag in tags if not on_page(tag, _page(stem))]
    assert not missing, (
        f"docs/scripts/{stem}.md lacks these TensorBoard tags that cleanrl/{stem}.py logs: {', '.join(missing)}"
    )


def test_help_read_in_one_process_is_the_scripts_own_help(helps):
    """tests/docs_contract.py imports the scripts to read their help in one process: it gives the flags that
    ``python cleanrl/ppo.py --help`` prints."""
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "cleanrl/ppo.py", "--help"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert help_flags(out.stdout) == help_flags(helps["ppo"])
    assert {"--seed", "--cuda", "--exp-name", "--anneal-lr", "--target-kl"} <= set(help_flags(out.stdout))
    assert "--no-cuda" not in help_flags(out.stdout)


def test_tag_reading():
    """script_tags reads literals, loop-expanded f-strings and the tags of the cleanrl_utils calls a script makes."""
    assert {"losses/approx_kl", "charts/SPS", "charts/episodic_return", "eval/episodic_return"} <= set(script_tags("ppo"))
    assert {"losses/policy_loss", "losses/aux/kl_loss"} <= set(script_tags("ppg_procgen"))
    assert "charts/epsilon/actor_\0" in script_tags("r2d2_async")
    assert on_page("charts/epsilon/actor_\0", "`charts/epsilon/actor_<i>`")
    assert on_page("--seed", "| `--seed` | 1 |") and not on_page("--seed", "`--seeds`")
    assert not on_page("charts/episodic_return", "`charts/episodic_return_std`")


# ---- the browser ------------------------------------------------------------------------------------------------


def _browser_paths() -> tuple[str | None, str | None]:
    browser = next(
        (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None
    )
    return browser, shutil.which("chromedriver")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(site):
    """The built site served by http.server on a free port of 127.0.0.1."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def driver():
    browser, chromedriver = _browser_paths()
    if browser is None or chromedriver is None:
        reason = "no chromium or chromedriver on PATH (apt-get install chromium chromium-driver)"
        if os.environ.get("CLEANRL_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CLEANRL_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))  # never downloads a driver
    chrome.set_page_load_timeout(60)
    yield chrome
    chrome.quit()


_IMAGES_LOADED = """
const done = arguments[arguments.length - 1];
const images = [...document.images];
images.forEach(image => { image.loading = "eager"; });
const started = Date.now();
(function poll() {
  if (images.every(image => image.complete) || Date.now() - started > 5000) {
    done(images.filter(image => !(image.complete && image.naturalWidth > 0)).map(image => image.currentSrc || image.src));
  } else { setTimeout(poll, 50); }
})();
"""

_LINKS_AND_RESOURCES = """
return [[...document.querySelectorAll("a[href]")].map(a => a.href),
        performance.getEntriesByType("resource").map(entry => entry.name)];
"""


def _target(site: Path, path: str) -> Path:
    target = site / unquote(path).lstrip("/")
    return target / "index.html" if target.is_dir() else target


def _screenshot(driver, path: Path) -> None:
    """A PNG of the whole page (at most 16000 px high), not only of the window."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 16000), "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip})
    path.write_bytes(base64.b64decode(shot["data"]))


def test_every_page_opens_in_a_browser_without_errors(site, server, driver):
    """Every HTML page of the site, opened in headless Chromium: no SEVERE console entry, every <img> loaded, every
    link to this site reaching a page that exists and, with a #fragment, an element of that id, nothing fetched from
    another host. All pages are visited; the failure lists every problem found."""
    screenshots = os.environ.get("DOCS_SCREENSHOTS")
    if screenshots:
        Path(screenshots).mkdir(parents=True, exist_ok=True)
    driver.set_script_timeout(30)
    pages = sorted(str(path.relative_to(site)) for path in site.rglob("*.html"))
    ids: dict[Path, set[str]] = {}
    problems: list[str] = []
    origin = urlsplit(server)
    started = time.monotonic()
    for page in pages:
        driver.get(f"{server}/{page}")
        for entry in driver.get_log("browser"):
            if entry["level"] == "SEVERE":
                problems.append(f"{page}: console: {entry['message']}")
        problems += [f"{page}: image not loaded: {src}" for src in driver.execute_async_script(_IMAGES_LOADED)]
        links, resources = driver.execute_script(_LINKS_AND_RESOURCES)
        for url in resources:
            if urlsplit(url).netloc not in ("", origin.netloc) and urlsplit(url).scheme in ("http", "https"):
                problems.append(f"{page}: fetched from another host: {url}")
        for url in dict.fromkeys(links):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or parts.netloc != origin.netloc:
                continue
            target = _target(site, parts.path)
            if not target.is_file():
                problems.append(f"{page}: link to a missing page: {url}")
            elif parts.fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = _parse(target).ids
                if unquote(parts.fragment) not in ids[target]:
                    problems.append(f"{page}: link to a missing anchor: {url}")
        if screenshots:
            _screenshot(driver, Path(screenshots) / (page.replace("/", "__").removesuffix(".html") + ".png"))
    problems += [
        f"{page}: console, late: {entry['message']}" for entry in driver.get_log("browser") if entry["level"] == "SEVERE"
    ]
    assert len(pages) > 1, f"the site has no pages: {pages}"
    assert not problems, f"{len(problems)} problems in {len(pages)} pages ({time.monotonic() - started:.0f} s):\n" + "\n".join(
        problems
    )


def test_search_works_offline(site, server, driver):
    """Material's search works from the served site (its worker and index are local files): "ppo" finds the PPO
    pages."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{server}/index.html")
    driver.execute_script("document.querySelector('label[for=__search]').click()")
    box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.send_keys("ppo")
    results = WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item a"))
    assert any("/scripts/ppo" in (result.get_attribute("href") or "") for result in results), [
        result.get_attribute("href") for result in results
    ]
    severe = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, severe
