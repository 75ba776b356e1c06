"""The console page's own script (memagent/operator/console.html), run in Node against a small
stand-in for the DOM, the admin API and the managed login: what an operator types for one person
stays with that person; a short-lived access token is renewed with the refresh token until an
admin signs the operator out. The browser test of the whole console is tests/stack/test_console.py
(slow tier)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap

import pytest

from memagent.operator import page

NODE = shutil.which("node")

# A document of plain objects (only what the page's script touches), fetch answering as the
# admin API does, and the steps of one scenario; prints what the test asserts on, as JSON
HARNESS = textwrap.dedent(
    """
    const elements = {};
    function element(id) {
      return {
        id, value: "", hidden: false, textContent: "", className: "", dataset: {},
        disabled: false, children: [], onclick: null, oninput: null,
        replaceChildren(...c) { this.children = c; },
        append(...c) { this.children.push(...c); },
        querySelector() { return null; },
      };
    }
    globalThis.document = {
      activeElement: null,
      getElementById(id) { return (elements[id] = elements[id] || element(id)); },
      createElement() { return element(""); },
      querySelectorAll() { return []; },
    };
    elements["console-config"] = element("console-config");
    elements["console-config"].textContent = JSON.stringify({ door: "proxy", token: "t" });
    globalThis.setInterval = () => 0;
    globalThis.location = { origin: "http://127.0.0.1", pathname: "/", search: "" };
    globalThis.confirm = () => true;
    globalThis.prompt = () => null;
    const posted = [];
    const held = {};  // person -> a conversation answer held back until released
    globalThis.fetch = async (url, options) => {
      const path = decodeURIComponent(url.replace(/^\\/api/, ""));
      const method = options.method;
      if (method !== "GET") posted.push({ method, path, body: JSON.parse(options.body || "null") });
      const answer = (data) => ({ ok: true, status: 200, json: async () => data });
      if (path === "/handoffs") return answer({ handoffs: [] });
      if (path === "/conversations") return answer({ conversations: [] });
      const who = path.split("/")[2];
      if (path.endsWith("/follow-ups")) return answer({ follow_ups: [] });
      if (path.endsWith("/conversation")) {
        const c = {
          handoff: { handed_off: true, since: "2026-12-01T09:00:00Z", waiting: 0 },
          summary: { text: `the summary of ${who}`, at: "2026-12-01T09:00:00Z" },
          messages: [{ by: "person", text: `hello from ${who}` }], facts: [],
        };
        if (held[who]) await held[who];
        return answer(c);
      }
      return answer({});
    };
    const settle = () => new Promise((resolve) => setTimeout(resolve, 20));
    const el = (id) => document.getElementById(id);
    async function opens(who) {
      el("open-phone").value = who; el("open").onclick(); await settle();
    }
    const fields = ["reply-text", "add-fact-text", "follow-up-when", "follow-up-about"];
    const seen = () => Object.fromEntries(fields.map((f) => [f, el(f).value]));
    const out = {};
    (async () => {
      await settle();
      // the operator opens A and starts a reply, a fact and a follow-up for A
      await opens("+447700900123");
      el("reply-text").value = "Hi Maya, your order ships Monday";
      el("add-fact-text").value = "Prefers email";
      el("follow-up-when").value = "2026-12-06T09:00";
      el("follow-up-about").value = "ask whether the order came";
      // then opens B: B's boxes are B's, empty; and Send there sends nothing of A's
      await opens("+447700900456");
      out.b = seen();
      el("send").onclick(); await settle();
      // back to A: A's drafts are where they were left, and Send sends them to A
      await opens("+447700900123");
      out.a = seen();
      el("send").onclick(); await settle();
      // a slow answer for A that arrives after B was opened is not shown as B's
      let release;
      held["+447700900123"] = new Promise((resolve) => { release = resolve; });
      el("open-phone").value = "+447700900123"; el("open").onclick();
      await opens("+447700900456");
      release(); await settle();
      out.shown = { who: el("who").textContent, summary: el("summary-text").value };
      out.posted = posted;
      console.log(JSON.stringify(out));
    })();
    """
)


def _script() -> str:
    html, _headers = page({"door": "proxy", "token": "t"})
    [script] = re.findall(r"<script nonce=\"[^\"]+\">(.*?)</script>", html, re.S)
    return script


def test_drafts_stay_with_the_person_they_were_written_for(tmp_path):
    if NODE is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's nodejs (.ci/run)")
        pytest.skip("Node.js is not installed")
    # given the page's script, as the console serves it, in Node with a stand-in document
    program = tmp_path / "console.js"
    program.write_text(HARNESS + "\n" + _script())
    # when an operator writes to A, opens B, sends there, and goes back to A
    done = subprocess.run(  # noqa: S603 (node, a file of ours)
        [str(NODE), str(program)], capture_output=True, text=True, timeout=30, check=True
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # then B's boxes were empty: nothing written for A was in them, or sent to B
    assert out["b"] == {
        "reply-text": "",
        "add-fact-text": "",
        "follow-up-when": "",
        "follow-up-about": "",
    }
    # and A's drafts were kept for A, and the reply went to A alone
    assert out["a"]["reply-text"] == "Hi Maya, your order ships Monday"
    assert out["a"]["follow-up-about"] == "ask whether the order came"
    assert [(p["path"], p["body"]["text"]) for p in out["posted"]] == [
        ("/people/+447700900123/messages", "Hi Maya, your order ships Monday")
    ]
    # and an answer about A that arrives late is not shown as B's
    assert out["shown"] == {"who": "+447700900456", "summary": "the summary of +447700900456"}


# The page behind the user pool's door, signed in a while ago: its access token has expired, and
# its refresh token is good (or revoked); fetch answers as the managed login and the API do
REFRESHING = textwrap.dedent(
    """
    function element(id) {
      return {
        id, value: "", hidden: false, textContent: "", className: "", dataset: {},
        disabled: false, children: [], onclick: null, oninput: null,
        replaceChildren(...c) { this.children = c; }, append(...c) { this.children.push(...c); },
      };
    }
    const elements = {};
    globalThis.document = {
      activeElement: null,
      getElementById(id) { return (elements[id] = elements[id] || element(id)); },
      createElement() { return element(""); },
      querySelectorAll() { return []; },
    };
    const login = "https://ops-login.example";
    elements["console-config"] = element("console-config");
    elements["console-config"].textContent = JSON.stringify(
      { door: "user-pool", login, client: "console-client" });
    globalThis.setInterval = () => 0;
    const went = [];
    globalThis.location = {
      origin: "https://console.example", pathname: "/", search: "",
      assign(url) { went.push(url.split("?")[0]); },
    };
    globalThis.history = { replaceState() {} };
    const store = {};
    globalThis.sessionStorage = {
      getItem: (k) => (k in store ? store[k] : null),
      setItem: (k, v) => { store[k] = String(v); }, removeItem: (k) => { delete store[k]; },
    };
    const jwt = (claims) => "h." + btoa(JSON.stringify(claims)).replace(/=+$/, "") + ".s";
    const now = Math.floor(Date.now() / 1000);
    store["console-tokens"] = JSON.stringify({
      access: jwt({ exp: now - 60, username: "ana" }), id: jwt({ exp: now - 60 }),
      refresh: "the-refresh-token",
    });
    const fresh = jwt({ exp: now + 900, username: "ana" });
    const seen = [];
    globalThis.fetch = async (url, options) => {
      const answer = (status, data) => ({ ok: status < 400, status, json: async () => data });
      if (url === `${login}/oauth2/token`) {
        const form = Object.fromEntries(new URLSearchParams(options.body));
        seen.push({ token: form });
        if (REVOKED) return answer(400, { error: "invalid_grant" });
        return answer(200, { access_token: fresh, id_token: fresh, expires_in: 900 });
      }
      seen.push({ api: url, authorization: options.headers.Authorization });
      return answer(200, url === "/handoffs" ? { handoffs: [] } : { conversations: [] });
    };
    setTimeout(() => {
      const kept = JSON.parse(store["console-tokens"] || "null");
      console.log(JSON.stringify({ seen, went, kept }));
    }, 100);
    """
)


@pytest.mark.parametrize("revoked", [False, True], ids=["refreshed", "signed-out"])
def test_an_expired_access_token_is_renewed_with_the_refresh_token_until_revoked(tmp_path, revoked):
    if NODE is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's nodejs (.ci/run)")
        pytest.skip("Node.js is not installed")
    html, _headers = page({"door": "user-pool", "login": "x", "client": "y"})
    [script] = re.findall(r"<script nonce=\"[^\"]+\">(.*?)</script>", html, re.S)
    program = tmp_path / "console.js"
    program.write_text(f"const REVOKED = {json.dumps(revoked)};\n{REFRESHING}\n{script}")
    # when the page starts with an expired access token and its refresh token
    done = subprocess.run(  # noqa: S603 (node, a file of ours)
        [str(NODE), str(program)], capture_output=True, text=True, timeout=30, check=True
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # then it asks the managed login's token endpoint for new tokens with it, for its client
    trades = [s["token"] for s in out["seen"] if "token" in s]
    assert trades and all(
        t
        == {
            "grant_type": "refresh_token",
            "client_id": "console-client",
            "refresh_token": "the-refresh-token",
        }
        for t in trades
    )
    calls = [s for s in out["seen"] if "api" in s]
    if not revoked:
        # and calls the admin API with the new access token, no sign-in page in between
        assert calls and all(c["authorization"].startswith("Bearer h.") for c in calls)
        assert out["went"] == [] and out["kept"]["refresh"] == "the-refresh-token"
    else:
        # a revoked one: no call is made, the tokens are forgotten, the managed login opens
        assert calls == [] and out["kept"] is None
        assert out["went"] and set(out["went"]) == {"https://ops-login.example/oauth2/authorize"}


# The page on a whasp stack, an operator's reply held in flight while the 5-second refresh runs
SENDING = textwrap.dedent(
    """
    const elements = {};
    function element(id) {
      return {
        id, value: "", hidden: false, textContent: "", className: "", dataset: {},
        disabled: false, children: [], onclick: null, oninput: null,
        replaceChildren(...c) { this.children = c; }, append(...c) { this.children.push(...c); },
      };
    }
    globalThis.document = {
      activeElement: null,
      getElementById(id) { return (elements[id] = elements[id] || element(id)); },
      createElement() { return element(""); },
      querySelectorAll() { return ["send", "hand-back"].map((id) => document.getElementById(id)); },
    };
    elements["console-config"] = element("console-config");
    elements["console-config"].textContent = JSON.stringify({ door: "proxy", token: "t" });
    globalThis.setInterval = () => 0;
    globalThis.location = { origin: "http://127.0.0.1", pathname: "/", search: "" };
    let release;
    const sent = new Promise((resolve) => { release = resolve; });
    globalThis.fetch = async (url, options) => {
      const path = decodeURIComponent(url.replace(/^\\/api/, ""));
      const answer = (data) => ({ ok: true, status: 200, json: async () => data });
      if (options.method === "POST") { await sent; return answer({ sent: true }); }
      if (path === "/handoffs") return answer({ handoffs: [] });
      if (path.endsWith("/conversation")) {
        return answer({
          handoff: { handed_off: true, since: "2026-12-01T09:00:00Z", waiting: 0 },
          messages: [], facts: [], summary: null, reply_window: null,
        });
      }
      return answer({ conversations: [], follow_ups: [] });
    };
    const settle = () => new Promise((resolve) => setTimeout(resolve, 20));
    const el = (id) => document.getElementById(id);
    (async () => {
      await settle();
      el("open-phone").value = "+447700900123"; el("open").onclick(); await settle();
      el("reply-text").value = "Hi Maya";
      el("send").onclick(); await settle();
      await refresh();  // the page's own refresh, as its 5-second timer runs it
      const during = { send: el("send").disabled, back: el("hand-back").disabled };
      release(); await settle();
      const after = { send: el("send").disabled, back: el("hand-back").disabled };
      console.log(JSON.stringify({ during, after }));
    })();
    """
)


def test_a_refresh_while_a_reply_is_sent_keeps_its_buttons_disabled(tmp_path):
    if NODE is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's nodejs (.ci/run)")
        pytest.skip("Node.js is not installed")
    # given the page's script in Node, a reply on its way when the page refreshes the chat
    program = tmp_path / "console.js"
    program.write_text(SENDING + "\n" + _script())
    # when the refresh ends before the reply's request does
    done = subprocess.run(  # noqa: S603 (node, a file of ours)
        [str(NODE), str(program)], capture_output=True, text=True, timeout=30, check=True
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # then Send (and every other button) stayed disabled until the request ended: a second
    # click is not a second request, and a click elsewhere is not lost to a disabled button
    assert out["during"] == {"send": True, "back": True}
    assert out["after"] == {"send": False, "back": False}
