"""The fixed replies as data (memagent/turn/replies.toml): every text in every language, the same
placeholders in each, the operator's changes checked at cold start, and the person's language
read from their words."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from memagent.errors import ConfigurationError
from memagent.memory import PersonState
from memagent.turn import ConsumerSettings
from memagent.turn.keywords import CSAT_OPTIONS, normalised
from memagent.turn.language import LANGUAGES, language_of
from memagent.turn.replies import built_in, language_for, placeholders
from tests.unit.test_settings import CONSUMER

TURN = Path(__file__).resolve().parents[2] / "layers" / "memagent" / "turn"
NAMES = sorted(built_in().texts)


def test_every_fixed_reply_exists_in_every_language_with_the_same_placeholders():
    replies = built_in()
    assert NAMES, "replies.toml holds no text"
    for name in NAMES:
        by_language = replies.texts[name]
        assert sorted(by_language) == sorted(LANGUAGES), name
        english = placeholders(by_language["en"])
        for language, text in by_language.items():
            assert text.strip(), (name, language)
            assert placeholders(text) == english, (name, language)


def test_the_languages_read_their_own_texts():
    # a translation pasted into the wrong language would be answered in the wrong one (the
    # CSAT question's options are one word each: too short to tell, checked below)
    options = {name for name, _score in CSAT_OPTIONS}
    for name in (n for n in NAMES if n not in options):
        for language, text in built_in().texts[name].items():
            assert language_of(text) == language, (name, language, text)


def test_the_csat_options_fit_a_reply_button_and_each_word_means_one_score():
    # Meta's reply buttons take titles of at most 20 characters; a tap comes back as the title,
    # and a word that answered "good" in one language and "bad" in another would be misread
    texts = built_in().texts
    scores: dict[str, int] = {}
    for name, score in CSAT_OPTIONS:
        for language, option in texts[name].items():
            assert 0 < len(option) <= 20, (name, language, option)
            assert scores.setdefault(normalised(option), score) == score, (name, language)


def test_every_fixed_reply_the_turn_names_is_in_the_file():
    # the names in the turn's code ("handoff_notice", fixed("fallback") ...) are texts of the
    # file, and every text of the file is sent by some step
    named = set()
    for module in (m for m in TURN.glob("*.py") if m.name != "replies.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Constant) and node.value in NAMES:
                named.add(node.value)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "fixed":
                [argument] = node.args
                if isinstance(argument, ast.Constant):
                    assert argument.value in NAMES, argument.value
    assert named == set(NAMES)


def test_a_placeholder_is_filled_and_an_unknown_language_is_the_default():
    text = built_in().text("data_request", "fr", forget_keyword="oublie-moi")
    assert "« oublie-moi »" in text and "{forget_keyword}" not in text
    assert built_in().text("fallback", "nl") == built_in().text("fallback", "en")


def test_an_operators_file_replaces_the_texts_it_gives_and_keeps_the_rest(tmp_path):
    # given a clinic's replies file: its Spanish handoff notice, Spanish by default
    (tmp_path / "replies.toml").write_text(
        'default_language = "es"\n[handoff_notice]\nes = "Le paso con la recepción."\n'
    )
    env = {**CONSUMER, "LAMBDA_TASK_ROOT": str(tmp_path), "REPLIES_FILE": "replies.toml"}
    # when the consumer starts
    replies = ConsumerSettings.from_env(env).replies
    # then that text is the clinic's, the others are as built in, and Spanish is the default
    assert replies.text("handoff_notice", "es") == "Le paso con la recepción."
    assert replies.text("handoff_notice", "en") == built_in().text("handoff_notice", "en")
    assert replies.text("budget_notice", None) == built_in().text("budget_notice", "es")


def test_the_older_single_text_settings_are_every_languages_text():
    env = {**CONSUMER, "BUDGET_NOTICE": "Back tomorrow!", "HANDOFF_NOTICE": "A human is coming."}
    replies = ConsumerSettings.from_env(env).replies
    assert {replies.text("budget_notice", lang) for lang in LANGUAGES} == {"Back tomorrow!"}
    assert replies.text("handoff_notice", "de") == "A human is coming."


@pytest.mark.parametrize(
    ("written", "named"),
    [
        ("[handoff_notic]\nen = 'x'\n", "handoff_notic"),
        ("[handoff_notice]\nnl = 'x'\n", "handoff_notice.nl"),
        ("[handoff_notice]\nen = ''\n", "handoff_notice.en"),
        ("[data_request]\nen = 'write {forget_word}'\n", "{forget_word}"),
        ("[fallback]\nen = 'Sorry, {name}'\n", "{name}"),
        ('default_language = "nl"\n', "default_language"),
        ("[fallback\n", "not a readable TOML file"),
    ],
)
def test_a_bad_replies_file_stops_the_cold_start_naming_the_entry(tmp_path, written, named):
    (tmp_path / "replies.toml").write_text(written)
    env = {**CONSUMER, "REPLIES_FILE": str(tmp_path / "replies.toml")}
    with pytest.raises(ConfigurationError, match="REPLIES_FILE") as raised:
        ConsumerSettings.from_env(env)
    assert named in str(raised.value)


def test_a_missing_replies_file_is_named():
    with pytest.raises(ConfigurationError, match=r"REPLIES_FILE nowhere\.toml"):
        ConsumerSettings.from_env({**CONSUMER, "REPLIES_FILE": "nowhere.toml"})


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Can I book a cleaning for Tuesday?", "en"),
        ("¿Puedo reservar una limpieza para el martes?", "es"),
        ("Je voudrais prendre rendez-vous pour mardi", "fr"),
        ("Quero marcar uma consulta para terça", "pt"),
        ("Ich möchte einen Termin für Dienstag", "de"),
        ("Vorrei prenotare una visita per martedì", "it"),
        ("ok", None),
        ("Maya", None),
        ("humano", None),  # Spanish and Portuguese alike
        ("👍", None),
    ],
)
def test_the_language_is_read_from_the_words_or_left_unsaid(text, language):
    assert language_of(text) == language


def test_a_message_that_says_no_language_is_answered_in_the_one_the_person_wrote_in():
    replies = built_in()
    # a Spanish message: Spanish, whatever the state says
    assert (
        language_for("Hola, quiero cambiar mi cita", PersonState(language_code="pt"), replies)
        == "es"
    )
    # "ok" says nothing: the state's Spanish
    assert language_for("ok", PersonState(language_code="es"), replies) == "es"
    # someone new who says nothing: the default
    assert language_for("ok", PersonState(), replies) == "en"
