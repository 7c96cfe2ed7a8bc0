"""The documentation site: it builds with ``mkdocs build --strict``, every script has its page with every flag and
every logged tag, and every page opens in headless Chromium without a console error, an image that did not load,
a link to a page or anchor that does not exist, or a resource fetched from another host.

The browser test needs Debian's ``chromium`` and ``chromium-driver`` (``apt-get install chromium chromium-driver``);
without them it is skipped, unless ``CLEANRL_REQUIRE_BROWSER=1`` (CI) makes that a failure. With
``DOCS_SCREENSHOTS=<dir>`` it saves a full-page PNG of every page there. ``CLEANRL_DOCS_ROOT=<dir>`` tests the site
of another copy of the repository (tests/docs_contract.py).
"""

import base64
import contextlib
import hashlib
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


LIST_IN_PARAGRAPH = re.compile(r"<p>(?:(?!</p>).)*?\n\s*(?:[-*+]|\d+\.) \S", re.S)
"""A paragraph holding a line that starts as a list item: a list Markdown did not make (no blank line before it)."""


def test_no_page_has_a_list_that_markdown_left_as_a_paragraph(site):
    """A Markdown list needs a blank line before it; without one, its items run on as one paragraph (the
    benchmarks page's learning tests once read as one 40-line paragraph)."""
    found = []
    for page in sorted(site.rglob("*.html")):
        for match in LIST_IN_PARAGRAPH.finditer(page.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{page.relative_to(site)}: {re.sub(r'<[^>]+>', '', match.group(0))[:160]!r}")
    assert not found, "lists rendered as paragraphs (add a blank line before the list):\n" + "\n".join(found)


INTERNAL_WORDING = re.compile(
    r"\btargets? (?:of )?[\d.]+×|[\d.]+× target|\b(?:was |were )?not met\b|\bfresh-user\b|\btrials?\b", re.I
)
"""What the project's own work items say, not a user: "the target of 1.5× was not met", "a trial". (Optuna's trials,
in the tuning guide, the exit codes and the tuner's reference, are the tool's own word.)"""
TRIALS_ARE_OPTUNAS = {"guides/tuning.md", "guides/faults.md", "reference/tuner.md"}


def test_pages_say_what_was_measured_not_internal_targets():
    """The user pages state measurements against what they were measured against, not the project's targets or
    trials: a speed is a ratio against a named peer, and whether it met an internal goal is not the reader's concern."""
    docs = ROOT / "docs"
    found = []
    for page in sorted(docs.rglob("*.md")):
        name = str(page.relative_to(docs))
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for match in INTERNAL_WORDING.finditer(line):
                if match.group(0).lower().startswith("trial") and name in TRIALS_ARE_OPTUNAS:
                    continue
                found.append(f"docs/{name}:{number}: {line.strip()[:140]}")
    assert not found, "wording aimed at the project's developers:\n" + "\n".join(found)


# ---- formulas -----------------------------------------------------------------------------------------------------
# A formula is LaTeX, \( ... \) inline or \[ ... \] displayed: pymdownx.arithmatex keeps it whole, out of Markdown's
# reach, and KaTeX (docs/assets/katex/, served by the site) typesets it in the browser. Written as plain text, its
# underscores and asterisks become emphasis: "δ_t = r_t + γ V(s'_t) - V(s_t), A_t = ... A_(t+1)" rendered with
# "t) - V(s_t), A_t = δ_t + γ λ (1 - done_t) A" in italics and the subscripts gone.

KATEX = ROOT / "docs" / "assets" / "katex"
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
_BLOCK = {"p", "li", "td", "th", "div", "dd", "dt", "h1", "h2", "h3", "h4", "h5", "h6", "br", "tr", "table"}


class _Prose(html.parser.HTMLParser):
    """A page's text outside code and formulas (``code``, ``pre``, ``script``, ``style`` and ``.arithmatex`` elements
    become one space), the spans of its ``<em>`` and ``<strong>`` elements in that text, and its formulas' sources."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text, self.emphasis, self.formulas = "", [], []
        self._stack: list[tuple[str, bool, bool, int]] = []  # (tag, hides its text, is a formula, where it starts)

    def _hidden(self) -> bool:
        return any(hides for _, hides, _, _ in self._stack)

    def handle_starttag(self, tag, attrs):
        if tag in _VOID:
            self.text += "\n" if tag == "br" else ""
            return
        math = "arithmatex" in (dict(attrs).get("class") or "").split()
        if math and not self._hidden():
            self.formulas.append("")
        self._stack.append((tag, math or tag in ("code", "pre", "script", "style", "kbd", "samp"), math, len(self.text)))

    def handle_endtag(self, tag):
        while self._stack:
            name, hides, _, start = self._stack.pop()
            if hides and not self._hidden():
                self.text += " "
            if name in ("em", "strong") and not self._hidden():
                self.emphasis.append((start, len(self.text)))
            if name == tag:
                break
        if tag in _BLOCK:
            self.text += "\n"

    def handle_data(self, data):
        if not self._hidden():
            self.text += data
        elif self.formulas and any(math for _, _, math, _ in self._stack):
            self.formulas[-1] += data


def _prose(path: Path) -> _Prose:
    parser = _Prose()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    parser.close()
    return parser


RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\begin\{")
"""A TeX delimiter left in the text: a formula that arithmatex did not take (its syntax is \\( \\) and \\[ \\] only)."""

FORMULA_TEXT = re.compile(
    r"(?<![\w/.-])[A-Za-zα-ωΑ-Ω]{1,2}[′']?_(?:[{(]|[A-Za-z0-9α-ω]{1,2}\b)"  # s_t, δ_t, s'_{t+1}, A_(t+1), u_ij
    r"|(?<![\w/.-])[A-ZΑ-Ωα-ω][′']?_[A-Za-z]"  # Q_target, E_aux, β_clone
    r"|[Σ∑]_|[\wα-ω)]\^[-\w({]"  # Σ_i, γ^m, (N P(i))^-β
    r"|(?<![*\s])[\wα-ω)]\*(?![*\w])"  # a*
)
"""Sub- and superscripts written as plain text: the characters Markdown's emphasis takes."""

EMPHASIS_GLUED = re.compile(r"[\wα-ω′')\]]")
"""A character that never sits right before an emphasis Markdown made on purpose (nor, but ``)``/``]``, right after
one: see ``_stray_emphasis``)."""


def _stray_emphasis(prose: _Prose) -> list[str]:
    """The ``<em>``/``<strong>`` spans glued to the text around them (``V(s'<em>t) - V(s_t), A</em>(t+1)``): an
    emphasis a writer meant starts after a space or an opening bracket and ends before one or a punctuation mark."""
    found = []
    for start, end in prose.emphasis:
        before, after = prose.text[start - 1 : start], prose.text[end : end + 1]
        if EMPHASIS_GLUED.fullmatch(before or " ") or re.fullmatch(r"[\wα-ω(\[{]", after or " "):
            found.append(
                f"{prose.text[max(0, start - 20) : start]}<em>{prose.text[start:end][:60]}</em>{prose.text[end : end + 20]}"
            )
    return found


def _formula_problems(site: Path) -> list[str]:
    """Every page: no emphasis glued to a word (Markdown eating a formula's ``_`` or ``*``), no TeX delimiter left in
    the text; and on the pages written in Markdown (not the reference pages, whose text is the modules' docstrings,
    read in the source, where formulas stay plain text), no sub- or superscript written outside a formula."""
    problems = []
    for page in sorted(site.rglob("*.html")):
        name, prose = str(page.relative_to(site)), _prose(page)
        problems += [f"{name}: emphasis made from a formula: {found!r}" for found in _stray_emphasis(prose)]
        for match in RAW_TEX.finditer(prose.text):
            problems.append(f"{name}: TeX outside a formula: {prose.text[max(0, match.start() - 40) : match.end() + 40]!r}")
        if not name.startswith("reference/"):
            for match in FORMULA_TEXT.finditer(prose.text):
                context = prose.text[max(0, match.start() - 30) : match.end() + 30]
                problems.append(f"{name}: a formula written as text, not as \\( ... \\): {context!r}")
    return problems


def test_formulas_are_latex_and_markdown_eats_none(site):
    """The site's text outside code has no emphasis made from a formula's ``_`` or ``*``, no TeX left outside a
    formula, and (but the reference pages) no sub- or superscript written as plain text; the algorithm pages have
    their formulas (GAE, Q(λ), the QR-DQN target and loss) as LaTeX."""
    problems = _formula_problems(site)
    assert not problems, f"{len(problems)} formula problems (write formulas as \\( ... \\) or \\[ ... \\]):\n" + "\n".join(
        problems
    )
    formulas = {page: _prose(site / "scripts" / f"{page}.html").formulas for page in ("ppo", "pqn", "qrdqn")}
    assert any(r"A_t = \delta_t + \gamma\lambda" in f for f in formulas["ppo"]), formulas["ppo"]
    assert any(r"\lambda G_{t+1}" in f for f in formulas["pqn"]), formulas["pqn"]
    assert any(r"\mathcal{T}\theta_j = G + \gamma^m" in f for f in formulas["qrdqn"]), formulas["qrdqn"]
    assert any(r"\rho^\kappa_{\hat\tau_i}(u_{ij})" in f for f in formulas["qrdqn"]), formulas["qrdqn"]


def test_the_formula_checks_catch_what_markdown_does_to_a_formula(tmp_path):
    """The checks above on small pages: emphasis eaten from GAE's underscores and from QR-DQN's a*, a subscript left
    as text, a TeX delimiter outside arithmatex; and none on the same formulas as LaTeX, nor on emphasis meant."""
    pages = {
        "gae.html": "<p>δ_t = r_t + γ (1 - terminated_t) V(s'<em>t) - V(s_t), A_t = δ_t + γ λ (1 - done_t) A</em>(t+1)</p>",
        "qrdqn.html": "<p>T θ_j = G + γ^m θ_j(s', a<em>), a</em> = argmax</p>",
        "text.html": "<p>the discount γ^m and V(s_t)</p>",
        "tex.html": r"<p>a formula \(x_t\) arithmatex did not take</p>",
        "latex.html": r'<p><span class="arithmatex">\(A_t = \delta_t + \gamma\lambda A_{t+1}\)</span>, <em>meant</em> and '
        r"(<strong>bold</strong>), <code>s_t</code></p>",
    }
    for name, body in pages.items():
        (tmp_path / name).write_text(f"<html><body>{body}</body></html>")
    problems = _formula_problems(tmp_path)
    assert {p.split(":")[0] for p in problems} == {"gae.html", "qrdqn.html", "text.html", "tex.html"}, problems
    assert any("gae.html: emphasis made from a formula" in p for p in problems)
    assert any("qrdqn.html: emphasis made from a formula" in p for p in problems)
    assert any("text.html: a formula written as text" in p and "γ^m" in p for p in problems)
    assert any("tex.html: TeX outside a formula" in p for p in problems)


def test_katex_is_the_vendored_package_unchanged():
    """docs/assets/katex/ holds the files SOURCE.txt lists, with the checksums it records (copied unchanged from the
    npm package katex at the version it names), the licence among them, and every WOFF2 font katex.min.css names."""
    source = (KATEX / "SOURCE.txt").read_text()
    version = re.search(r"^Package:\s+katex (\S+), from the npm registry$", source, re.M).group(1)
    recorded = dict((path, digest) for digest, path in re.findall(r"^  ([0-9a-f]{64})  (\S+)$", source, re.M))
    present = {str(p.relative_to(KATEX)) for p in KATEX.rglob("*") if p.is_file() and p.name != "SOURCE.txt"}
    assert set(recorded) == present, (
        f"SOURCE.txt lists {sorted(set(recorded) - present)} not there; lists not {sorted(present - set(recorded))}"
    )
    changed = [path for path, digest in recorded.items() if hashlib.sha256((KATEX / path).read_bytes()).hexdigest() != digest]
    assert not changed, f"changed since they were copied from katex {version}: {changed}"
    assert "LICENSE" in recorded and "MIT License" in (KATEX / "LICENSE").read_text()
    assert f'version:"{version}"' in (KATEX / "katex.min.js").read_text(), f"katex.min.js is not katex {version}"
    fonts = re.findall(r"url\((fonts/[\w-]+\.woff2)\)", (KATEX / "katex.min.css").read_text())
    assert len(fonts) == 20 and all((KATEX / font).is_file() for font in fonts), fonts


# ---- the browser ------------------------------------------------------------------------------------------------


def _browser_paths() -> tuple[str | None, str | None]:
    browser = next(
        (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None
    )
    return browser, shutil.which("chromedriver")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _serve(directory: Path):
    """``directory`` served by http.server on a free port of 127.0.0.1: its URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(directory)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def server(site):
    """The built site served by http.server on a free port of 127.0.0.1."""
    with _serve(site) as url:
        yield url


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


_TYPESET = r"""
const done = arguments[arguments.length - 1];
const started = Date.now();
(function poll() {
  const math = [...document.querySelectorAll(".arithmatex")];
  const pending = math.filter(element => !element.querySelector(".katex") && !element.dataset.katexError);
  if (pending.length && Date.now() - started < 5000) { setTimeout(poll, 50); return; }
  document.fonts.ready.then(() => {
    const problems = pending.map(element => "not typeset: " + element.textContent.trim().slice(0, 120));
    for (const element of math.filter(element => element.dataset.katexError)) {
      problems.push(`KaTeX cannot typeset ${element.textContent.trim().slice(0, 120)}: ${element.dataset.katexError}`);
    }
    for (const error of document.querySelectorAll(".katex-error")) {
      problems.push(`KaTeX cannot typeset ${error.textContent.slice(0, 120)}: ${error.title}`);
    }
    const raw = /\\\(|\\\)|\\\[|\\\]|\$\$|\\begin\{/;
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest("code, pre, script, style, textarea, .arithmatex")) continue;
      if (raw.test(node.textContent)) problems.push("TeX left as text: " + node.textContent.trim().slice(0, 120));
    }
    for (const font of document.fonts) {
      if (font.family.includes("KaTeX") && font.status === "error") problems.push("font not loaded: " + font.family);
    }
    done([math.length, problems]);
  });
})();
"""


def _typeset_problems(driver, url: str) -> tuple[int, list[str]]:
    """Open ``url`` and wait for KaTeX: the number of formulas on the page, and what did not render (a formula left
    untypeset or shown as a KaTeX error, TeX delimiters left in the text, a KaTeX font that did not load)."""
    driver.get(url)
    return driver.execute_async_script(_TYPESET)


def test_every_formula_is_typeset_in_a_browser(site, server, driver):
    """Every page in headless Chromium: each formula (``.arithmatex``) rendered by KaTeX from the site's own copy,
    none a KaTeX error, no TeX left as text, every KaTeX font that a page needs loaded."""
    driver.set_script_timeout(30)
    counts, problems = {}, []
    for page in sorted(str(path.relative_to(site)) for path in site.rglob("*.html")):
        counts[page], found = _typeset_problems(driver, f"{server}/{page}")
        problems += [f"{page}: {problem}" for problem in found]
    assert not problems, f"{len(problems)} formulas not rendered:\n" + "\n".join(problems)
    assert all(counts[f"scripts/{stem}.html"] >= 3 for stem in ("ppo", "pqn", "qrdqn")), counts
    assert sum(counts.values()) > 200, f"only {sum(counts.values())} formulas on the whole site"


def test_the_browser_check_catches_a_formula_katex_cannot_typeset(site, driver, tmp_path):
    """The check above on one page that loads the site's KaTeX: a formula with a missing brace is reported with
    KaTeX's message (an undefined command), and TeX outside arithmatex's element is reported as text; a correct formula
    is not."""
    shutil.copytree(site / "assets", tmp_path / "assets")
    scripts = "".join(
        f'<script src="assets/{path}"></script>'
        for path in ("katex/katex.min.js", "katex/contrib/auto-render.min.js", "javascripts/katex.js")
    )
    (tmp_path / "page.html").write_text(
        '<!doctype html><html><head><link rel="stylesheet" href="assets/katex/katex.min.css"></head><body>'
        r'<p><span class="arithmatex">\(A_t = \delta_t + \gamma\lambda A_{t+1}\)</span></p>'
        r'<p><span class="arithmatex">\(\hat\tau_i = \fracc{2i - 1}{2N}\)</span></p>'
        r"<p>left as text: \(x_t\)</p>"
        "<script>window.document$ = {subscribe: render => document.addEventListener('DOMContentLoaded', render)};"
        f"</script>{scripts}</body></html>"
    )
    driver.set_script_timeout(30)
    with _serve(tmp_path) as url:
        count, problems = _typeset_problems(driver, f"{url}/page.html")
    assert count == 2 and len(problems) == 2, problems
    assert problems[0].startswith(r"KaTeX cannot typeset \(\hat\tau_i = \fracc{2i - 1}{2N}\): ParseError"), problems
    assert r"Undefined control sequence: \fracc" in problems[0], problems
    assert problems[1].startswith(r"TeX left as text: left as text: \(x_t\)"), problems
