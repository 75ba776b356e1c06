"""Every fixed text the agent sends a person, per language, as data: memagent/turn/replies.toml,
with the operator's changes, read and checked at cold start (a bad entry stops it, named).

    replies.text("handoff_notice", "es")        the Spanish handoff notice
    replies.text("data_request", "fr", forget_keyword="forget me")

The person's language (`language_for`) is the one their message is written in
(memagent/turn/language.py), else the one they last wrote in (kept in their state,
`language_code`),
else the default: `en`, or the operator's `default_language`.

The operator changes any text without code, in a TOML file of the built-in's shape shipped beside
the consumer's handler (REPLIES_FILE, relative to functions/consumer/, like TOOLS_FILE):

    default_language = "es"        # optional: for a person whose language is not known yet
    [handoff_notice]
    es = "Le paso con el equipo de la clínica: le responderán aquí."
    en = "I'm passing you to the clinic's team: they'll answer you here."

A text or language the agent does not have, an empty text, or a placeholder its English text
does not hold is refused, naming the file and the entry. BUDGET_NOTICE and HANDOFF_NOTICE (older
settings) still set their one text in every language; REPLIES_FILE's entries come after them
(memagent/turn/settings.py reads all three).

The same file may hold the words the agent recognises, the lists of WORD_LISTS, which
memagent/turn/settings.py reads in place of HANDOFF_PHRASES and OPT_OUT_WORDS (there is no
room for long lists in the function's environment: Lambda allows 4 KB for all its variables):

    handoff_phrases = ["talk to a person", "humano"]     # [] = none
    opt_out_words = ["stop", "baja", "no more messages"]
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memagent.errors import ConfigurationError
from memagent.turn.language import DEFAULT_LANGUAGE, LANGUAGES, language_of

if TYPE_CHECKING:
    from memagent.memory import PersonState

BUILT_IN = Path(__file__).with_name("replies.toml")
# lists an operator's replies file may hold besides the texts (memagent/turn/settings.py)
WORD_LISTS = ("handoff_phrases", "opt_out_words")
PLACEHOLDER = re.compile(r"\{(\w+)\}")


def placeholders(text: str) -> frozenset[str]:
    return frozenset(PLACEHOLDER.findall(text))


@dataclass(frozen=True)
class Replies:
    """The fixed texts: name -> language -> text, every name in every language."""

    texts: Mapping[str, Mapping[str, str]] = field(repr=False)
    default_language: str = DEFAULT_LANGUAGE

    def text(self, name: str, language: str | None = None, **values: str) -> str:
        """The text `name` in `language` (the default language when None or unknown), with
        its placeholders filled from `values` (one not given is left as written)."""
        by_language = self.texts[name]
        text = by_language.get(language or "") or by_language[self.default_language]
        return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)

    def changed(self, changes: Mapping[str, Any], where: str) -> Replies:
        """These texts with the operator's `changes` (a parsed file of the built-in's shape),
        checked; ConfigurationError names `where` and the entry."""
        texts = {name: dict(by_language) for name, by_language in self.texts.items()}
        default = changes.get("default_language", self.default_language)
        if default not in LANGUAGES:
            raise ConfigurationError(
                f"{where}: default_language {default!r} is not one of {', '.join(LANGUAGES)}"
            )
        for name, by_language in changes.items():
            if name == "default_language":
                continue
            if name not in texts:
                raise ConfigurationError(
                    f"{where}: [{name}] is no fixed reply (the replies: {', '.join(texts)})"
                )
            if not isinstance(by_language, Mapping):
                raise ConfigurationError(f"{where}: [{name}] must be a table of languages")
            for language, text in by_language.items():
                texts[name][language] = _checked(
                    text, f"{where}: {name}.{language}", language, self.texts[name]
                )
        return replace(self, texts=texts, default_language=default)

    def everywhere(self, name: str, text: str, where: str) -> Replies:
        """These texts with `name` as `text` in every language (an older single-text setting)."""
        return self.changed({name: dict.fromkeys(LANGUAGES, text)}, where)

    def from_file(self, path: Path, where: str) -> Replies:
        """These texts with the changes of the TOML file at `path`, checked."""
        return self.changed(load(path, where), where)


def load(path: Path, where: str) -> dict[str, Any]:
    """An operator's replies file, parsed (ConfigurationError names `where`)."""
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigurationError(f"{where}: not a readable TOML file ({error})") from None


def _checked(text: Any, entry: str, language: str, built_in: Mapping[str, str]) -> str:
    if language not in LANGUAGES:
        raise ConfigurationError(
            f"{entry}: the agent recognises {', '.join(LANGUAGES)} (memagent/turn/language.py)"
        )
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(f"{entry}: must be a text")
    allowed = placeholders(built_in[DEFAULT_LANGUAGE])
    if unknown := sorted(placeholders(text) - allowed):
        allowed_text = ", ".join(f"{{{p}}}" for p in sorted(allowed)) or "none"
        raise ConfigurationError(
            f"{entry}: unknown placeholder {{{unknown[0]}}} (this text may hold: {allowed_text})"
        )
    return text.strip()


@functools.cache
def built_in() -> Replies:
    """The texts as the project ships them (replies.toml)."""
    with BUILT_IN.open("rb") as file:
        return Replies(texts=tomllib.load(file))


def language_for(text: str | None, state: PersonState, replies: Replies) -> str:
    """The person's language for a reply to `text`: the text's, else the one their state keeps
    (memagent/turn/remember.py learns it from each message), else the default."""
    return language_of(text) or state.language_code or replies.default_language
