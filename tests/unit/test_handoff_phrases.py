"""The phrases with which a person asks for a human, in several languages, and the setting."""

from __future__ import annotations

import pytest

from memagent.errors import ConfigurationError
from memagent.turn import ConsumerSettings
from memagent.turn.keywords import HANDOFF_PHRASES, OPT_OUT_WORDS, asks_for_human

BASE = {
    "AGENT_ID": "coach",
    "TABLE_NAME": "t",
    "OPENAI_MODEL": "m",
    "OPENAI_API_KEY": "k",
    "WHASP_API_URL": "https://whasp.example",
    "WHASP_API_KEY": "k",
    "PERSON_KEY": "p" * 40,
}


@pytest.mark.parametrize(
    "text",
    [
        "can I talk to a human?",
        "Human",
        "a human please",
        "I want to speak to someone",
        "AGENT!!",
        "¿Puedo hablar con una persona?",
        "humano",
        "Je veux parler à quelqu\u2019un",  # a curly apostrophe
        "une personne svp",
        "quero falar com uma pessoa",
        "Ich möchte mit einem Menschen sprechen",
        "posso parlare con un operatore?",
    ],
)
def test_asking_for_a_human_is_recognised_in_several_languages(text):
    assert asks_for_human(text, HANDOFF_PHRASES)


@pytest.mark.parametrize(
    "text",
    [
        "I work in human resources",
        "my travel agent booked it",
        "she is a lovely person",
        "talk to a human " + "and then some more words that make it a long story " * 2,
        "",
    ],
)
def test_a_message_that_only_mentions_a_person_is_not_a_request(text):
    assert not asks_for_human(text, HANDOFF_PHRASES)


def test_the_phrases_are_configurable_and_can_be_turned_off():
    custom = ConsumerSettings.from_env({**BASE, "HANDOFF_PHRASES": "call me, escalate please"})
    assert custom.handoff_phrases == ("call me", "escalate please")
    assert asks_for_human("Escalate, please!", custom.handoff_phrases)
    assert not asks_for_human("human", custom.handoff_phrases)
    assert ConsumerSettings.from_env({**BASE, "HANDOFF_PHRASES": "off"}).handoff_phrases == ()
    assert ConsumerSettings.from_env(BASE).handoff_phrases == HANDOFF_PHRASES
    with pytest.raises(ConfigurationError, match="HANDOFF_PHRASES"):
        ConsumerSettings.from_env({**BASE, "HANDOFF_PHRASES": " , "})
    with pytest.raises(ConfigurationError, match="HANDOFF_TIMEOUT_HOURS"):
        ConsumerSettings.from_env({**BASE, "HANDOFF_TIMEOUT_HOURS": "0"})


def test_opt_out_words_are_a_setting_that_always_keeps_stop():
    # the defaults: STOP and its like in the handoff phrases' languages
    assert ConsumerSettings.from_env(BASE).opt_out_words == OPT_OUT_WORDS
    # an operator's own words replace the others; "stop" and "unsubscribe" always count
    custom = ConsumerSettings.from_env({**BASE, "OPT_OUT_WORDS": "Halt, no more messages"})
    assert custom.opt_out_words == ("stop", "unsubscribe", "Halt", "no more messages")
    with pytest.raises(ConfigurationError, match="OPT_OUT_WORDS"):
        ConsumerSettings.from_env({**BASE, "OPT_OUT_WORDS": " , !"})
