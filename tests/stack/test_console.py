"""The operator console in a real browser: Debian's Chromium, headless, driven by selenium through
the system chromedriver (never a downloaded browser), against the local stack's admin API.

The operator sees who is waiting for a human, takes a chat over, replies, hands it back and
deletes a fact; the reply reaches the whasp stand-in once, and a double click on Send sends one
request. (What the console's server refuses: tests/integration/test_console_server.py.)

With OperatorConsole=true the stack serves the same page itself: an operator signs in through
the managed login (the local stand-in over moto's Cognito), answers a waiting person, hands the
chat back, and is refused the erasure their group may not do. (What the door refuses:
tests/integration/test_console_door.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest

from console.server import AdminApi, Console
from devstack.cognito import LOCAL_OPERATORS, LOCAL_PASSWORD
from devstack.stack import DevStack

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
MAYA, SAM = "+447700900123", "+447700900456"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)

pytestmark = [pytest.mark.slow]


def _installed() -> bool:
    return os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)


@pytest.fixture(scope="module")
def stack() -> Iterator[DevStack]:
    with DevStack(
        level="quiet",
        log_path=tempfile.mkdtemp() + "/stack.log",
        parameters={"FollowUps": "true", "OperatorConsole": "true"},
    ) as stack:
        yield stack


@pytest.fixture
def browser(monkeypatch) -> Iterator[Any]:
    if not _installed():
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium and chromium-driver (.ci/run)")
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common import service

    # selenium polls for chromedriver to listen with pauses growing to 0.5 s: poll in steps
    # within the suite's 50 ms bound instead (the same wait, finer grained)
    monkeypatch.setattr(service, "sleep", lambda seconds: time.sleep(min(seconds, 0.05)))

    profile = tempfile.mkdtemp(prefix="console-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def admin(stack: DevStack, method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        stack.apis["AdminApi"].url + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_the_operator_takes_over_replies_hands_back_and_deletes_a_fact(stack, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    # given Maya asked for a human, and Sam talks to the agent and has a fact the agent got wrong
    for phone, text in ((MAYA, "Hi, can I talk to a human?"), (SAM, "Hello, I'm Sam")):
        stack.send_message(phone, text)
    assert stack.wait_idle()
    admin(stack, "POST", f"/people/{quote(SAM)}/facts", {"text": "Has a dog called Rex"})
    sent_before = len(stack.replies_to(SAM))

    class Counted(AdminApi):
        """The admin API, counting the reply requests the console forwards."""

        replies = 0

        def call(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple:
            if method == "POST" and path.endswith("/messages"):
                Counted.replies += 1
            return super().call(method, path, body, headers)

    with Console(Counted(stack.apis["AdminApi"].url, sign=False)) as console:
        # the page re-renders its lists as answers arrive: an element read as it is replaced
        # is stale, and the wait reads the page again
        wait = WebDriverWait(
            browser, 60, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException]
        )
        browser.get(console.url)

        def shown(css: str, text: str) -> bool:
            return any(text in e.text for e in browser.find_elements(By.CSS_SELECTOR, css))

        # when the operator opens the console, they see Maya waiting for a human
        wait.until(lambda _: shown("#waiting li", MAYA))
        # when they open Sam's chat and take it over
        browser.find_element(By.ID, "open-phone").send_keys(SAM)
        browser.find_element(By.ID, "open").click()
        wait.until(lambda _: shown("#messages li", "Hello, I'm Sam"))
        browser.find_element(By.ID, "take-over").click()
        wait.until(lambda _: shown("#waiting li", SAM))
        # and reply, with a double click on Send
        words = "Hi Sam, this is Ana from the team. How can I help?"
        browser.find_element(By.ID, "reply-text").send_keys(words)
        ActionChains(browser).double_click(browser.find_element(By.ID, "send")).perform()
        wait.until(lambda _: shown("#messages li.human", words))
        wait.until(lambda _: browser.find_element(By.ID, "send").is_enabled())
        assert Counted.replies == 1  # the button was disabled while its request ran
        # and hand back, then delete the wrong fact
        browser.find_element(By.ID, "hand-back").click()
        wait.until(lambda _: browser.find_element(By.ID, "take-over").is_displayed())
        wait.until(lambda _: not shown("#waiting li", SAM))

        def delete_fact(text: str) -> bool:
            for fact in browser.find_elements(By.CSS_SELECTOR, "#facts li"):
                if text in fact.text:
                    button = fact.find_element(By.CSS_SELECTOR, "button.delete")
                    if not button.is_enabled():  # the last action's request still runs
                        return False
                    button.click()
                    return True
            return False

        wait.until(lambda _: delete_fact("Rex"))
        wait.until(lambda _: not shown("#facts li", "Rex"))
        # and schedule a follow-up for Sam (its words shown as text, never as HTML), then cancel it
        about = "ask how Rex's <b>vet</b> visit went"
        when = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT09:00")
        field = browser.find_element(By.ID, "follow-up-when")
        browser.execute_script("arguments[0].value = arguments[1]", field, when)
        browser.find_element(By.ID, "follow-up-about").send_keys(about)
        # its buttons stay disabled until the last action's request ends (two clicks would be
        # two requests): a click before then is ignored, as the page means it to be
        wait.until(lambda _: browser.find_element(By.ID, "schedule-follow-up").is_enabled())
        browser.find_element(By.ID, "schedule-follow-up").click()
        wait.until(lambda _: shown("#follow-ups li", about))
        assert len(stack.scheduler.pending()) == 1
        assert not browser.find_elements(By.CSS_SELECTOR, "#follow-ups li b")
        cancel = (By.CSS_SELECTOR, "#follow-ups li button.cancel")
        wait.until(lambda _: browser.find_element(*cancel).is_enabled())
        browser.find_element(*cancel).click()
        wait.until(lambda _: not shown("#follow-ups li", about))

    # then the reply reached the whasp stand-in exactly once, and memory holds the edits
    texts = [s["text"] for s in stack.replies_to(SAM)[sent_before:]]
    assert texts == [words]
    view = stack.view(SAM)
    assert "Has a dog called Rex" not in view.facts
    assert (view.turns[-1][1], view.turns[-1][2]) == ("assistant", words)
    assert admin(stack, "GET", f"/people/{quote(SAM)}/conversation")["handoff"] == {
        "handed_off": False
    }
    assert admin(stack, "GET", f"/people/{quote(SAM)}/follow-ups")["follow_ups"] == []
    assert stack.scheduler.pending() == []


def test_an_operator_signs_in_answers_a_waiting_person_hands_back_and_may_not_erase(stack, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    # given Ana asked for a human, and Bo just talks to the agent
    ana, bo = "+447700900321", "+447700900654"
    stack.send_message(ana, "Hello, can I talk to a human please?")
    stack.send_message(bo, "Hi, what are your opening hours?")
    assert stack.wait_idle()
    operator = next(u for u, groups in LOCAL_OPERATORS.items() if groups == ("operators",))
    wait = WebDriverWait(
        browser, 60, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException]
    )

    def shown(css: str, text: str) -> bool:
        return any(text in e.text for e in browser.find_elements(By.CSS_SELECTOR, css))

    # when an operator opens the console, it sends them to sign in
    browser.get(stack.console_api.url + "/")
    wait.until(lambda _: browser.find_elements(By.ID, "password"))
    assert browser.current_url.startswith(stack.user_pool.login.url + "/oauth2/authorize?")
    browser.find_element(By.ID, "username").send_keys(operator)
    browser.find_element(By.ID, "password").send_keys(LOCAL_PASSWORD)
    browser.find_element(By.ID, "sign-in").click()
    # then, back at the console (no code or token left in the address), they see Ana waiting
    wait.until(lambda _: shown("#operator-name", operator))
    assert browser.current_url == stack.console_api.url + "/"
    wait.until(lambda _: shown("#waiting li", ana))
    # and Bo among the recent conversations (Ana, waiting, only above); a filter finds him
    wait.until(lambda _: shown("#recent li", bo))
    assert not shown("#recent li", ana)
    browser.find_element(By.ID, "filter").send_keys("654")
    wait.until(
        lambda _: (
            [li.text.split("\n")[0] for li in browser.find_elements(By.CSS_SELECTOR, "#recent li")]
            == [bo]
        )
    )
    browser.find_element(By.CSS_SELECTOR, "#recent li").click()
    wait.until(lambda _: shown("#messages li", "opening hours"))
    # when they open her chat and answer
    next(
        li for li in browser.find_elements(By.CSS_SELECTOR, "#waiting li") if ana in li.text
    ).click()
    wait.until(lambda _: shown("#messages li", "can I talk to a human"))
    words = "Hi Ana, this is Ana's operator. How can I help?"
    browser.find_element(By.ID, "reply-text").send_keys(words)
    browser.find_element(By.ID, "send").click()
    wait.until(lambda _: shown("#messages li.human", words))
    # and hand the chat back (once the send is over: the buttons wait for it)
    wait.until(lambda _: browser.find_element(By.ID, "hand-back").is_enabled())
    browser.find_element(By.ID, "hand-back").click()
    wait.until(lambda _: browser.find_element(By.ID, "take-over").is_displayed())
    wait.until(lambda _: not shown("#waiting li", ana))
    # and try to erase her: their group may not
    wait.until(lambda _: browser.find_element(By.ID, "erase").is_enabled())
    browser.find_element(By.ID, "erase").click()
    browser.switch_to.alert.accept()
    wait.until(lambda _: "admins" in browser.find_element(By.ID, "status").text)
    # then the answer reached her once, the chat is the agent's, and nothing was erased
    assert [s["text"] for s in stack.replies_to(ana)].count(words) == 1
    assert admin(stack, "GET", f"/people/{quote(ana)}/conversation")["handoff"] == {
        "handed_off": False
    }
    assert stack.view(ana).turns[0][2] == "Hello, can I talk to a human please?"
    # and the token never reached a URL the browser kept
    history = browser.execute_script("return performance.getEntriesByType('navigation')")
    assert all("access_token" not in entry["name"] for entry in history)


def test_scripts_people_has_the_consoles_verbs(stack, capsys):
    import importlib.util

    from devstack.resources import ROOT

    spec = importlib.util.spec_from_file_location("people", ROOT / "scripts" / "people.py")
    people = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(people)
    url = ["--url", stack.apis["AdminApi"].url]
    ana = "+447700900789"
    stack.send_message(ana, "Hi there")
    assert stack.wait_idle()

    def run(*argv: str) -> Any:
        assert people.main([*argv, *url]) == 0
        return json.loads(capsys.readouterr().out)

    # facts by hand: add, correct, delete, each shown by `facts`
    added = run("add-fact", ana, "Likes tea")["fact"]
    corrected = run("correct-fact", ana, "Likes green tea", "--fact", added["id"])["fact"]
    assert [f["text"] for f in run("facts", ana)["facts"]] == ["Likes green tea"]
    run("delete-fact", ana, "--fact", corrected["id"])
    assert run("facts", ana)["facts"] == []
    assert run("summary", ana, "Ana says hi.")["summary"]["text"] == "Ana says hi."
    # the chat: take over, say once (a retry with the same key sends nothing more), hand back
    assert run("take-over", ana)["handoff"]["handed_off"] is True
    assert ana in [h["address"] for h in run("waiting")["handoffs"]]
    for _ in range(2):
        run("say", ana, "Hello Ana, a human here", "--key", "cli-ana-1")
    assert [s["text"] for s in stack.replies_to(ana)].count("Hello Ana, a human here") == 1
    assert run("hand-back", ana)["ended"] is True
    assert run("conversation", ana)["handoff"] == {"handed_off": False}


# a browser that lets the page notify, as an operator's would once allowed: each notification
# recorded, and whether the page asked for the permission (only on the operator's click)
NOTIFICATIONS = """
window.__notified = []; window.__asked = 0;
window.Notification = class { constructor(title, options) {
  window.__notified.push({ title, body: (options || {}).body }); } };
window.Notification.permission = "default";
window.Notification.requestPermission = async () => {
  window.__asked += 1; window.Notification.permission = "granted"; return "granted"; };
"""
SCREENSHOT = Path(tempfile.gettempdir()) / "console-400px.png"


@pytest.fixture
def meta_stack() -> Iterator[DevStack]:
    from devstack.events import META_WABA_ID

    with DevStack(
        level="quiet",
        log_path=tempfile.mkdtemp() + "/stack.log",
        provider="meta",
        parameters={"MetaWabaId": META_WABA_ID},  # the WABA whose approved templates it lists
    ) as s:
        yield s


def test_at_400px_the_console_shows_names_times_who_waits_and_metas_window_and_sends_a_template(
    meta_stack, browser
):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from devstack.events import meta_contact, meta_message, meta_notification

    stack = meta_stack
    # the business has an approved reminder with two parameters in WhatsApp Manager
    stack.graph.templates["session_reminder"] = {
        "languages": {"en_US"},
        "parameters": 2,
        "body": "Hi {{1}}, your session is on {{2}}. Reply to confirm.",
    }
    # a phone's width, in New York's time zone, notifications not yet allowed
    browser.set_window_size(400, 1400)
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 400, "height": 1400, "deviceScaleFactor": 1, "mobile": False},
    )
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "America/New_York"})
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": NOTIFICATIONS})

    def writes(phone: str, name: str, text: str, at: datetime) -> None:
        message = meta_message(text, phone=phone, timestamp=int(at.timestamp()))
        stack._expect_accepted(  # Meta's notification: the sender's contact entry names them
            stack.post_meta(
                meta_notification(
                    contacts=[meta_contact(phone=phone, name=name)],
                    messages=[message],
                    number_id=stack.business_number,
                )
            )
        )
        assert stack.wait_idle()

    # given Maya ("Maya Okafor" on WhatsApp) wrote 25 hours ago, and an operator took her chat
    wrote = (stack.now() - timedelta(hours=25)).replace(microsecond=0)
    writes(MAYA, "Maya Okafor", "Hi, do you have a slot on Friday?", wrote)
    admin(stack, "POST", f"/people/{quote(MAYA)}/handoff")
    wait = WebDriverWait(
        browser, 60, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException]
    )

    def shown(css: str, text: str) -> bool:
        return any(text in e.text for e in browser.find_elements(By.CSS_SELECTOR, css))

    def opened(phone: str) -> bool:
        for li in browser.find_elements(By.CSS_SELECTOR, "#waiting li"):
            if phone in li.text:
                li.click()
                return True
        return False

    with Console(AdminApi(stack.apis["AdminApi"].url, sign=False)) as console:
        # when the operator opens the console
        browser.get(console.url)
        wait.until(lambda _: shown("#waiting li", MAYA))
        # then nobody waits (the operator has Maya's chat), and the page asked nothing on load
        assert browser.title == "Operator console"
        assert browser.execute_script("return window.__asked") == 0
        # when they allow notifications, with a click
        wait.until(lambda _: browser.find_element(By.ID, "notify").is_displayed())
        browser.find_element(By.ID, "notify").click()
        wait.until(lambda _: not browser.find_element(By.ID, "notify").is_displayed())
        assert browser.execute_script("return window.__asked") == 1
        # and Sam ("Sam Lee") asks for a human
        writes(SAM, "Sam Lee", "Can I talk to a human please?", stack.now())
        # then the title says one person waits, and a notification (naming nobody) says so
        wait.until(lambda _: browser.title.startswith("(1) waiting"))
        notified = browser.execute_script("return window.__notified")
        assert len(notified) == 1 and SAM not in json.dumps(notified)
        assert "Sam" not in json.dumps(notified)
        # when they open Maya's chat
        next(
            li for li in browser.find_elements(By.CSS_SELECTOR, "#waiting li") if MAYA in li.text
        ).click()
        wait.until(lambda _: shown("#messages li", "slot on Friday"))
        # then her profile's name heads it, her message shows when she wrote it (New York time)
        assert browser.find_element(By.ID, "who").text == f"Maya Okafor · {MAYA}"
        [said] = [li for li in browser.find_elements(By.CSS_SELECTOR, "#messages li.person")]
        local = wrote.astimezone(ZoneInfo("America/New_York"))
        time_shown = said.find_element(By.TAG_NAME, "time").text
        assert f"{local.hour % 12 or 12}:{local.minute:02d}" in time_shown or (
            f"{local.hour:02d}:{local.minute:02d}" in time_shown
        ), time_shown
        # and Meta's window is closed: the send box says a template is needed and takes no text
        wait.until(lambda _: "template is needed" in browser.find_element(By.ID, "window").text)
        assert not browser.find_element(By.ID, "reply-text").is_enabled()
        assert not browser.find_element(By.ID, "send").is_enabled()
        assert "template" in browser.find_element(By.ID, "reply-text").get_attribute("placeholder")
        # when they pick the approved reminder, fill in its two parameters and send it
        wait.until(lambda _: browser.find_element(By.ID, "template-box").is_displayed())
        picker = (By.ID, "template-name")
        wait.until(lambda _: "session_reminder" in browser.find_element(*picker).text)
        boxes = browser.find_elements(By.CSS_SELECTOR, "#template-parameters input")
        assert [box.get_attribute("placeholder") for box in boxes] == ["{{1}}", "{{2}}"]
        boxes[0].send_keys("Maya")
        boxes[1].send_keys("Friday 10am")
        browser.find_element(By.ID, "send-template").click()
        # then Meta sends it once, and her conversation keeps it as she reads it, by a human
        rendered = "Hi Maya, your session is on Friday 10am. Reply to confirm."
        wait.until(lambda _: shown("#messages li.human", rendered))
        assert [s["text"] for s in stack.replies_to(MAYA)].count(rendered) == 1
        # when they open Sam's chat: his window has about 24 hours left, and the box takes text
        # (the list re-renders after each action: a click on an entry being replaced is retried)
        wait.until(lambda _: opened(SAM))
        wait.until(lambda _: browser.find_element(By.ID, "who").text == f"Sam Lee · {SAM}")
        wait.until(lambda _: "left" in browser.find_element(By.ID, "window").text)
        assert re.search(r"2[34] h \d+ min left", browser.find_element(By.ID, "window").text)
        assert browser.find_element(By.ID, "reply-text").is_enabled()
        # and at 400 px nothing scrolls sideways: the lists sit above the conversation
        assert browser.execute_script("return window.innerWidth") == 400
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 400
        aside = browser.find_element(By.TAG_NAME, "aside").rect
        main = browser.find_element(By.TAG_NAME, "main").rect
        assert main["y"] >= aside["y"] + aside["height"] - 1
        browser.save_screenshot(str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 0
