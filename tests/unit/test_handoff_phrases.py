"""A handoff the person means: the phrases are a fast path for explicit requests for a human, in
six languages, and never hand over a message that only names the service or a person. A request
in other words is the model's (request_human: tests/integration/test_keywords.py runs this set
through the consumer). And the phrases' setting."""

from __future__ import annotations

from collections import Counter

import pytest

from memagent.errors import ConfigurationError
from memagent.turn import ConsumerSettings
from memagent.turn.keywords import HANDOFF_PHRASES, OPT_OUT_WORDS, asks_for_human
from memagent.turn.language import LANGUAGES

BASE = {
    "AGENT_ID": "coach",
    "TABLE_NAME": "t",
    "OPENAI_MODEL": "m",
    "OPENAI_API_KEY": "k",
    "WHASP_API_URL": "https://whasp.example",
    "WHASP_API_KEY": "k",
    "PERSON_KEY": "p" * 40,
}

EXPLICIT, MEANT, NOT = "explicit request", "request in other words", "no request"
# (language, what the person writes, what it is): half requests, half not, in every language
HANDOFF_SET = [
    ("en", "Can I talk to a human?", EXPLICIT),
    ("en", "human", EXPLICIT),
    ("en", "I want to speak to a real person please", EXPLICIT),
    ("en", "Could someone from the clinic call me back about my bill?", MEANT),
    ("en", "Thanks! Your customer service is great.", NOT),
    ("en", "Is the dentist a real person or a bot?", NOT),
    ("en", "I don't want to talk to a human, you're doing fine", NOT),
    ("en", "My travel agent booked the flights for us", NOT),
    ("es", "¿Puedo hablar con una persona?", EXPLICIT),
    ("es", "Humano", EXPLICIT),
    ("es", "Quiero hablar con un agente, por favor", EXPLICIT),
    ("es", "¿Alguien de la clínica me puede llamar?", MEANT),
    ("es", "¡Gracias! Su servicio al cliente es excelente.", NOT),
    ("es", "¿El dentista es una persona real o un bot?", NOT),
    ("es", "No quiero hablar con una persona, usted me ayuda muy bien", NOT),
    ("es", "Mi hermana es agente de viajes", NOT),
    ("fr", "Je voudrais parler à un conseiller", EXPLICIT),
    ("fr", "humain", EXPLICIT),
    ("fr", "Est-ce que je peux parler à une personne ?", EXPLICIT),
    ("fr", "Quelqu'un de l'équipe peut me rappeler ?", MEANT),
    ("fr", "Merci ! Votre service client est super.", NOT),
    ("fr", "Le dentiste est-il une vraie personne ou un robot ?", NOT),
    ("fr", "Je ne veux pas parler à un humain, tout va bien", NOT),
    ("fr", "Personne ne m'a rappelé hier", NOT),
    ("pt", "Quero falar com um atendente", EXPLICIT),
    ("pt", "atendente", EXPLICIT),
    ("pt", "Posso falar com uma pessoa?", EXPLICIT),
    ("pt", "Alguém da clínica pode me ligar?", MEANT),
    ("pt", "Obrigado! O atendimento de vocês é ótimo.", NOT),
    ("pt", "O dentista é uma pessoa real ou um robô?", NOT),
    ("pt", "Não quero falar com uma pessoa, está tudo bem", NOT),
    ("pt", "A atendente de ontem foi muito simpática", NOT),
    ("de", "Ich möchte mit einem Menschen sprechen", EXPLICIT),
    ("de", "Mitarbeiter bitte", EXPLICIT),
    ("de", "Kann ich mit einem Mitarbeiter sprechen?", EXPLICIT),
    ("de", "Kann mich jemand aus der Praxis zurückrufen?", MEANT),
    ("de", "Danke! Ihr Kundenservice ist toll.", NOT),
    ("de", "Ist der Zahnarzt ein echter Mensch oder ein Bot?", NOT),
    ("de", "Ich will nicht mit einem Menschen sprechen, alles gut", NOT),
    ("de", "Mensch, war das heute ein langer Tag!", NOT),
    ("it", "Posso parlare con un operatore?", EXPLICIT),
    ("it", "operatore", EXPLICIT),
    ("it", "Vorrei parlare con una persona", EXPLICIT),
    ("it", "Qualcuno dello studio mi può richiamare?", MEANT),
    ("it", "Grazie! Il vostro servizio clienti è ottimo.", NOT),
    ("it", "Il dentista è una persona reale o un bot?", NOT),
    ("it", "Non voglio parlare con un operatore, va benissimo così", NOT),
    ("it", "L'operatore di ieri è stato gentilissimo", NOT),
]


def of(kind: str) -> list[str]:
    return [text for _, text, each in HANDOFF_SET if each == kind]


def test_the_set_is_half_requests_and_half_not_in_each_of_the_six_languages():
    assert len(HANDOFF_SET) >= 40
    assert len(of(NOT)) == len(of(EXPLICIT)) + len(of(MEANT))
    by_language = Counter((language, kind == NOT) for language, _, kind in HANDOFF_SET)
    for language in LANGUAGES:
        assert by_language[(language, True)] == by_language[(language, False)] > 0, language


@pytest.mark.parametrize("text", of(NOT))
def test_no_message_that_only_names_the_service_or_a_person_hands_over(text):
    assert not asks_for_human(text, HANDOFF_PHRASES)


@pytest.mark.parametrize("text", of(EXPLICIT))
def test_every_explicit_request_for_a_human_is_recognised(text):
    assert asks_for_human(text, HANDOFF_PHRASES)


@pytest.mark.parametrize("text", of(MEANT))
def test_a_request_in_other_words_is_left_to_the_model(text):
    # not the fast path's: the model reads it, and asks for a human with request_human
    assert not asks_for_human(text, HANDOFF_PHRASES)


@pytest.mark.parametrize(
    "text",
    [
        "AGENT!!",
        "a human please",
        "Je veux parler à un humain",
        "Je veux parler \u00e0 un conseiller",
        "No, I want to talk to a human",  # a "no" before, that answers something else
        "live agent",
        "\uff28\uff35\uff2d\uff21\uff2e",  # a full-width HUMAN (NFKC)
    ],
)
def test_explicit_requests_as_written(text):
    assert asks_for_human(text, HANDOFF_PHRASES)


@pytest.mark.parametrize(
    "text",
    [
        "I work in human resources",
        "a table for one person, please",
        "Real person or not, thanks for the help today",
        "talk to a human " + "and then some more words that make it a long story " * 2,
        "",
    ],
)
def test_a_message_that_only_mentions_a_person_is_not_a_request(text):
    assert not asks_for_human(text, HANDOFF_PHRASES)


def test_the_phrases_are_configurable_and_can_be_turned_off():
    custom = ConsumerSettings.from_env(
        {**BASE, "HANDOFF_PHRASES": "escalate please, get me the manager now"}
    )
    assert custom.handoff_phrases == ("escalate please", "get me the manager now")
    assert asks_for_human("Escalate, please!", custom.handoff_phrases)
    # a short phrase is a whole message; a longer one may stand in a sentence
    assert not asks_for_human("we should escalate the complaint", custom.handoff_phrases)
    assert asks_for_human("ok, get me the manager now!", custom.handoff_phrases)
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


@pytest.mark.parametrize(
    ("written", "named"),
    [
        ('handoff_phrases = "humano"\n', "handoff_phrases"),
        ("handoff_phrases = [1]\n", "handoff_phrases"),
        ('opt_out_words = ["!!"]\n', "opt_out_words"),
        ("opt_out_words = []\n", "opt_out_words"),
    ],
)
def test_the_replies_files_lists_are_words_or_the_cold_start_stops(tmp_path, written, named):
    # given a replies file whose list is not a list of words (or opts nobody out but by STOP)
    (tmp_path / "replies.toml").write_text(written)
    env = {**BASE, "REPLIES_FILE": str(tmp_path / "replies.toml")}
    # then the cold start stops, naming the file's entry
    with pytest.raises(ConfigurationError, match=f"REPLIES_FILE .*{named}"):
        ConsumerSettings.from_env(env)


def test_the_replies_files_lists_come_before_the_variables(tmp_path):
    # given a file with no handoff phrases and its own opt-out, and the variables set as well
    (tmp_path / "replies.toml").write_text('handoff_phrases = []\nopt_out_words = ["baja"]\n')
    env = {**BASE, "REPLIES_FILE": str(tmp_path / "replies.toml"), "HANDOFF_PHRASES": "human"}
    settings = ConsumerSettings.from_env({**env, "OPT_OUT_WORDS": "halt"})
    # then the file's lists are the ones read ("stop" and "unsubscribe" still count)
    assert settings.handoff_phrases == ()
    assert settings.opt_out_words == ("stop", "unsubscribe", "baja")
