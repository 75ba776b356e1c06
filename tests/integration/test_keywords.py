"""The person's keywords as a person writes them (memagent/turn/keywords.py): "STOP.", "Stop!", a
full-width STOP and every default opt-out word end the sends, on whasp and on Meta's Cloud API
(where STOP is ours to honour: Meta sends no opt-out event for chats), while the same word
inside a sentence is an ordinary message. Through the handlers: whasp's SQS records into the
consumer; Meta's signed POSTs into the webhook, its queue, then the consumer."""

from __future__ import annotations

import pytest

from devstack.events import META_NUMBER_ID
from memagent.turn.keywords import OPT_OUT_WORDS
from memagent.turn.language import LANGUAGES
from memagent.turn.replies import built_in
from tests.conftest import MAYA, load_function, sqs_batch, sqs_record
from tests.integration.test_bursts import ledger, rows
from tests.integration.test_consumer import SAM, failures, message
from tests.integration.test_meta import (
    MAYA_PHONE,
    NOW,
    Queue,
    graph,  # noqa: F401 (a fixture)
    graph_server,  # noqa: F401 (a fixture)
    meta_consumer_env,  # noqa: F401 (a fixture)
    post,
    text_from,
)
from tests.integration.test_meta import consumer as meta_consumer  # noqa: F401 (a fixture)
from tests.integration.test_meta import webhook as meta_webhook  # noqa: F401 (a fixture)

# what a person writes to stop, as they write it: punctuated, capitalised, full-width (NFKC)
AS_WRITTEN = ["STOP.", "Stop!", "\uff33\uff34\uff2f\uff30", "stop 🛑", "Unsubscribe!"]
STOPS = AS_WRITTEN + [w for w in OPT_OUT_WORDS if w not in ("stop", "unsubscribe")]
# the words inside a sentence: a message like any other, answered
SENTENCES = [
    "Please don't stop reminding me about my runs",
    "Stop. I meant to say I'll be late today",
    "ich will mich nicht abmelden, nur später trainieren",
]


@pytest.mark.parametrize("stop", STOPS)
def test_whasp_a_stop_as_written_ends_the_sends(
    consumer, resources, openai, whasp, lambda_context, stop
):
    # given a question, then the person's stop word, in one batch (the question awaits it)
    question, opt_out = message("can we move it to 10?", 0), message(stop, 1)
    # when the consumer handles the batch
    assert failures(consumer.handler(sqs_batch(question, opt_out), lambda_context)) == []
    # then nothing is sent, the model is not asked, and she is opted out
    assert whasp.texts_to(MAYA) == []
    assert openai.calls() == []
    [state] = rows(resources.table_name, prefix="STATE")
    assert state["opted_out"] is True
    assert ledger(resources.table_name)[opt_out["id"]]["stop"] is True


@pytest.mark.parametrize("sentence", SENTENCES)
def test_whasp_a_stop_word_inside_a_sentence_is_answered(
    consumer, resources, whasp, lambda_context, sentence
):
    assert failures(consumer.handler(sqs_batch(message(sentence, 0)), lambda_context)) == []
    assert len(whasp.texts_to(MAYA)) == 1
    [state] = rows(resources.table_name, prefix="STATE")
    assert state["opted_out"] is False


@pytest.mark.parametrize("stop", STOPS)
def test_meta_a_stop_as_written_ends_the_sends(
    meta_webhook,
    meta_consumer,
    resources,
    openai,
    graph,
    lambda_context,
    stop,
):
    queue = Queue(resources)
    # given a question, then the person's stop word, both queued before the consumer runs
    assert post(meta_webhook, text_from("can we move it?", phone=MAYA_PHONE), lambda_context) == 200
    assert post(meta_webhook, text_from(stop, phone=MAYA_PHONE, at=NOW + 5), lambda_context) == 200
    # when the consumer handles them
    assert queue.drain(meta_consumer, lambda_context) == 0
    # then Meta is asked to send nothing, and the model is not asked
    assert [s for s in graph.sent if s["from"] == META_NUMBER_ID] == []
    assert openai.calls() == []


@pytest.mark.parametrize("sentence", SENTENCES)
def test_meta_a_stop_word_inside_a_sentence_is_answered(
    meta_webhook,
    meta_consumer,
    resources,
    graph,
    lambda_context,
    sentence,
):
    queue = Queue(resources)
    assert post(meta_webhook, text_from(sentence, phone=MAYA_PHONE), lambda_context) == 200
    assert queue.drain(meta_consumer, lambda_context) == 0
    assert len(graph.sent) == 1


# ------------------------------------------------------------------ "send me my data"


@pytest.mark.parametrize(
    ("asked", "language"),
    [
        ("Send me my data", "en"),
        ("send me my data, please!", "en"),
        ("My data?", "en"),
        ("Envíame mis datos, por favor", "es"),
        ("Je veux mes données", "fr"),
        ("Quero meus dados", "pt"),
        ("Schick mir meine Daten", "de"),
        ("Inviami i miei dati", "it"),
    ],
)
def test_a_data_request_is_told_how_to_ask_for_a_copy_without_the_model(
    consumer, openai, whasp, lambda_context, asked, language
):
    # when Maya asks for her data
    assert failures(consumer.handler(sqs_batch(message(asked, 0)), lambda_context)) == []
    # then a fixed answer in her language says how: the team exports it, "forget me" erases it
    [reply] = whasp.texts_to(MAYA)
    assert reply == built_in().text("data_request", language, forget_keyword="forget me")
    assert "forget me" in reply
    assert openai.calls() == []


def test_a_sentence_about_data_is_the_models(consumer, openai, whasp, lambda_context):
    said = "Do you store my data somewhere safe?"
    assert failures(consumer.handler(sqs_batch(message(said, 0)), lambda_context)) == []
    assert len(openai.calls()) == 1 and len(whasp.texts_to(MAYA)) == 1


# ------------------------------------------------------------------ fixed replies, in her language


def test_a_spanish_speaker_gets_the_spanish_handoff_notice(
    consumer, resources, openai, whasp, lambda_context
):
    # when Maya asks for a person in Spanish
    said = message("¿Puedo hablar con una persona, por favor?", 0)
    assert failures(consumer.handler(sqs_batch(said), lambda_context)) == []
    # then she is told in Spanish that a person will answer, and the model is not asked
    assert whasp.texts_to(MAYA) == [built_in().text("handoff_notice", "es")]
    assert openai.calls() == []
    [state] = rows(resources.table_name, prefix="STATE")
    assert state["language_code"] == "es" and state["handoff_reason"] == "person"


def test_a_message_in_no_language_is_answered_in_the_one_she_wrote_in_before(
    consumer, resources, whasp, lambda_context
):
    # given Maya wrote in Portuguese before
    hello = message("Olá, quero marcar uma consulta para amanhã", 0)
    assert failures(consumer.handler(sqs_batch(hello), lambda_context)) == []
    # when she writes a word that Spanish and Portuguese share
    assert failures(consumer.handler(sqs_batch(message("humano", 1)), lambda_context)) == []
    # then the handoff notice is the Portuguese one, from her state
    assert whasp.texts_to(MAYA)[-1] == built_in().text("handoff_notice", "pt")


def test_an_operators_replies_file_replaces_a_fixed_reply(
    consumer_env, whasp, monkeypatch, tmp_path, lambda_context
):
    # given a clinic's own Spanish handoff notice, in a file beside the handler
    (tmp_path / "replies.toml").write_text(
        '[handoff_notice]\nes = "Le paso con la recepción de la clínica."\n', encoding="utf-8"
    )
    env = {**consumer_env, "LAMBDA_TASK_ROOT": str(tmp_path), "REPLIES_FILE": "replies.toml"}
    agent = load_function("consumer", env, monkeypatch)
    # when a Spanish speaker asks for a person, and an English speaker too
    spanish, english = message("Quiero hablar con un humano", 0), message("human", 0, chat=SAM)
    assert failures(agent.handler(sqs_batch(spanish, english), lambda_context)) == []
    # then the clinic's text is sent in Spanish, and the built-in one in English
    assert whasp.texts_to(MAYA) == ["Le paso con la recepción de la clínica."]
    assert whasp.texts_to(SAM) == [built_in().text("handoff_notice", "en")]


def test_an_operators_replies_file_gives_the_handoff_phrases_and_the_opt_out_words(
    consumer_env, resources, openai, whasp, monkeypatch, tmp_path, lambda_context
):
    # given a clinic's replies file with its own words: one phrase that asks for the front
    # desk, and its own opt-out (the template passes this file, not the lists: 4 KB of variables)
    (tmp_path / "replies.toml").write_text(
        'handoff_phrases = ["front desk please"]\nopt_out_words = ["no more reminders"]\n',
        encoding="utf-8",
    )
    env = {**consumer_env, "LAMBDA_TASK_ROOT": str(tmp_path), "REPLIES_FILE": "replies.toml"}
    agent = load_function("consumer", env, monkeypatch)
    # when Maya writes the clinic's phrase, Sam its opt-out, and Ana "humano" (a default phrase
    # the clinic's list leaves out)
    ana = "+447700900777"
    batch = sqs_batch(
        message("Front desk, please!", 0),
        message("No more reminders.", 0, chat=SAM),
        message("humano", 0, chat=ana),
    )
    assert failures(agent.handler(batch, lambda_context)) == []
    # then Maya is handed over, Sam is opted out and gets nothing, Ana is answered by the model
    assert whasp.texts_to(MAYA) == [built_in().text("handoff_notice", "en")]
    assert whasp.texts_to(SAM) == []
    [maya], [sam] = (
        rows(resources.table_name, MAYA, "STATE"),
        rows(resources.table_name, SAM, "STATE"),
    )
    assert maya["handoff_reason"] == "person" and sam["opted_out"] is True
    [ana_state] = rows(resources.table_name, ana, "STATE")
    assert not ana_state.get("handoff_reason") and ana_state["opted_out"] is False
    assert len(whasp.texts_to(ana)) == 1 and len(openai.calls()) == 1


# ------------------------------------------------------------------ a handoff the person means


def test_the_handoff_set_through_the_consumer_hands_over_every_request_and_nothing_else(
    consumer, resources, openai, whasp, lambda_context
):
    from tests.unit.test_handoff_phrases import EXPLICIT, HANDOFF_SET, MEANT

    # given the set's 48 sentences, each from its own person, in one batch
    people = [f"+4477009{n:05d}" for n in range(len(HANDOFF_SET))]
    said = zip(people, HANDOFF_SET, strict=True)
    batch = sqs_batch(*(message(text, 0, chat=phone) for phone, (_, text, _) in said))
    # when the consumer answers them, with the offline model (request_human offered)
    assert failures(consumer.handler(batch, lambda_context)) == []
    notices = {built_in().text("handoff_notice", lang): lang for lang in LANGUAGES}
    for phone, (language, text, kind) in zip(people, HANDOFF_SET, strict=True):
        [reply] = whasp.texts_to(phone)
        [state] = rows(resources.table_name, phone, "STATE")
        if kind in (EXPLICIT, MEANT):
            # then every request hands the chat over: explicit ones by the phrases, the others
            # by the model's request_human, with the notice in the person's language
            assert state.get("handoff_reason") == ("person" if kind == EXPLICIT else "agent"), text
            assert reply in notices, text
            assert notices[reply] == language or len(text.split()) == 1, text
        else:
            # and nothing else does: the model answers, and the agent goes on answering
            assert "handoff_since" not in state, text
            assert reply.startswith("[offline model]"), text
    # the fast path asked the model nothing: one model request per other sentence
    assert len(openai.calls()) == len(HANDOFF_SET) - sum(k == EXPLICIT for _, _, k in HANDOFF_SET)


def test_a_request_in_other_words_hands_over_once_and_the_next_message_waits_for_the_human(
    consumer, resources, openai, whasp, lambda_context
):
    # when Maya asks for the team in her own words
    asked = message("Could someone from the clinic call me back about my bill?", 0)
    assert failures(consumer.handler(sqs_batch(asked), lambda_context)) == []
    # then the model asked for a human (request_human offered on the turn), and she is told so
    [request] = openai.calls()
    assert [t["name"] for t in request["tools"]] == ["request_human", "offer_choices"]
    assert whasp.texts_to(MAYA) == [built_in().text("handoff_notice", "en")]
    # and what she writes next is the human's: no model call, no reply
    later = message("Any news?", 5)
    assert failures(consumer.handler(sqs_batch(later), lambda_context)) == []
    assert len(openai.calls()) == 1 and len(whasp.texts_to(MAYA)) == 1


def test_a_crash_after_the_model_asked_for_a_human_hands_over_once_without_asking_again(
    consumer, resources, openai, whasp, monkeypatch, lambda_context
):
    from tests.integration.faults import crash_after

    # given a turn that dies right after recording the model's request_human round
    crash_after(consumer.consumer.agent.store, "record_tool", monkeypatch)
    asked = message("¿Alguien de la clínica me puede llamar?", 0)
    assert failures(consumer.handler(sqs_batch(asked), lambda_context)) != []
    # when the queue delivers the message again
    again = {"Records": [sqs_record(asked, receive_count=2)]}
    assert failures(consumer.handler(again, lambda_context)) == []
    # then the recorded round is replayed, not asked anew: one model call, one Spanish notice
    assert len(openai.calls()) == 1
    assert whasp.texts_to(MAYA) == [built_in().text("handoff_notice", "es")]
    [state] = rows(resources.table_name, prefix="STATE")
    assert state["handoff_reason"] == "agent"
