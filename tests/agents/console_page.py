"""The console's new-key page as a browser gets it over plain HTTP (sign in, create a key), and the
agent snippets read from it exactly as printed: what a user copies (tests/agents runs them)."""

from __future__ import annotations

import html
import http.cookiejar
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass

UI = "/admin/ui"


@dataclass(frozen=True)
class PrintedSnippets:
    claude_code: str
    codex_command: str
    codex_profile: str
    notes: list[str]


def _code(page: str, element_id: str) -> str:
    found = re.search(rf'<code id="{element_id}">(.*?)</code>', page, re.S)
    assert found is not None, f"no #{element_id} on the page"
    return html.unescape(found.group(1))


def new_key_snippets(url: str, admin_token: str, team: str, models: list[str]) -> PrintedSnippets:
    """Signs in, creates a key of `team` for `models` (every model when empty) and returns the
    snippets the page that shows its secret prints."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def post(path: str, fields: list[tuple[str, str]]) -> str:
        data = urllib.parse.urlencode(fields).encode()
        request = urllib.request.Request(f"{url}{UI}{path}", data=data, method="POST")  # noqa: S310
        request.add_header("sec-fetch-site", "same-origin")  # as a browser sends from a console page
        with opener.open(request, timeout=30) as response:
            return str(response.read().decode())

    post("/login", [("token", admin_token), ("next", f"{UI}/")])
    with opener.open(f"{url}{UI}/teams/{team}/keys", timeout=30) as response:
        keys_page = response.read().decode()
    csrf = re.search(r'name="csrf" value="([^"]+)"', keys_page)
    assert csrf is not None, keys_page[:2000]
    page = post(
        f"/teams/{team}/keys",
        [("csrf", csrf.group(1)), ("name", "agent key"), *(("models", m) for m in models)],
    )
    notes = [html.unescape(n) for n in re.findall(r'<p class="hint snippet-note">(.*?)</p>', page, re.S)]
    return PrintedSnippets(
        _code(page, "snippet-claude"),
        _code(page, "snippet-codex-command"),
        _code(page, "snippet-codex-profile"),
        notes,
    )
