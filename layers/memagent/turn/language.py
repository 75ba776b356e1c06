"""The person's language, from their own words: which of LANGUAGES a message is written in, or
None when it does not say (a name, "ok", "humano", which Spanish and Portuguese share).

The fixed replies (memagent/turn/replies.py) exist in these six languages, the languages of the
keyword table (memagent/turn/keywords.py). Six languages told apart in a chat message need no
model: each language's most frequent words (and the letters only some of them write: ñ, ß, ã)
vote, a word shared by several languages splitting its vote, and the message is the language
with the most votes when it leads clearly. A library would not do better on a one-line message,
and none light enough for the layer is kept up to date (langdetect's last release is from 2021;
lingua's models weigh tens of MB; fastText's need numpy): this costs microseconds and no cold
start. Neither provider says a person's language: whasp's events carry none (docs/whasp.md), and
Meta's messages webhook names the person's profile and id, no locale.
"""

from __future__ import annotations

import unicodedata

LANGUAGES = ("en", "es", "fr", "pt", "de", "it")
DEFAULT_LANGUAGE = "en"

# the most frequent words of each language in short chat messages (function words, greetings,
# "want", "can", "talk", "data"): lower case, as `_words` reads a message
_WORDS: dict[str, str] = {
    "en": """the a an and is are was i you my me to of in it that this what how can could
        please thanks thank hi hello with for do don't not yes about your we have want would
        talk speak need am i'm it's be will just there they send data our their when where who
        great good is isn't can't didn't doesn't won't i'd i'll you're what's sorry today
        tomorrow here now all everything get again could would should""",
    "es": """el la los las de que y en un una es por con para no me mi mis te tu su lo al del
        se como pero más muy qué cómo hola gracias quiero puedo hablar favor sí está estoy
        tengo usted bien buenos buenas días necesito datos persona humano eso esto ya también
        cuando dónde hay envíame mándame ser soy gran servicio he ha han hemos puede otra
        otro manera perdone perdón le les nos todo aquí ahora hoy mañana vuelve""",
    "fr": """le la les de des du et est un une je tu vous il elle nous pas ne que qui pour
        avec dans sur mon ma mes merci bonjour oui non c'est j'ai suis veux voudrais parler
        très bien quelqu'un personne données au aux ce cette votre vos s'il plaît svp ça
        envoyez envoie moi êtes être humain conseiller grand service désolé pouvez tout
        aujourd'hui demain ici""",
    "pt": """o a os as de do da dos das que e em um uma é não para com por eu você meu minha
        meus obrigado obrigada olá oi sim quero posso falar pessoa humano dados está estou
        tenho muito bem bom boa dia isso isto como mais também no na nos nas ao pelo pela seu
        sua atendente favor gostaria preciso me envie manda ótimo serviço desculpe pode
        tudo hoje amanhã aqui agora consegui""",
    "de": """der die das und ist ich du sie wir nicht ein eine einen einem mit zu von für auf
        mein meine meinen bitte danke hallo ja nein kann möchte will sprechen reden mensch
        menschen mitarbeiter daten es den dem im sind haben habe wie was wer gut sehr auch
        noch aber oder schon mir mich schicken ihr toll entschuldigung können alles heute
        morgen hier jetzt""",
    "it": """il lo la i gli le di che e è un una uno non per con mi mio mia miei sono ho
        vorrei voglio posso parlare grazie ciao buongiorno sì si no come cosa anche ma più
        molto bene del della dei al alla nel nella operatore persona dati questo questa sei
        hai inviami mandami servizio ottimo scusi può tutto oggi domani qui ora riuscito""",
}
# elided articles and pronouns before an apostrophe ("l'agent", "j'aimerais", "dell'operatore")
_ELIDED: dict[str, str] = {
    "fr": "l d j c qu n s m t",
    "it": "l d un dell all nell sull quell",
}
# letters that some of the languages write and the others do not
_LETTERS: dict[str, str] = {
    "es": "ñ¿¡",
    "fr": "œêîûëïâùç",
    "pt": "ãõçêâ",
    "de": "ßäöü",
    "it": "ìò",
}


def _votes(table: dict[str, str]) -> dict[str, dict[str, float]]:
    """token -> {language: its share of the vote}: a token of n languages gives each 1/n."""
    owners: dict[str, set[str]] = {}
    for language, tokens in table.items():
        for token in tokens.split():
            owners.setdefault(token, set()).add(language)
    return {token: {lang: 1 / len(langs) for lang in langs} for token, langs in owners.items()}


_WORD_VOTES = _votes(_WORDS)
_ELIDED_VOTES = _votes(_ELIDED)
_LETTER_VOTES = _votes({language: " ".join(letters) for language, letters in _LETTERS.items()})
LEAD = 0.5  # the winner's votes over the runner-up's, at least


def _words(text: str) -> list[str]:
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    spaced = "".join(c if c.isalpha() or c == "'" else " " for c in text)
    return [w for w in (w.strip("'") for w in spaced.split()) if w]


def language_of(text: str | None) -> str | None:
    """The language of LANGUAGES the text is written in, or None when it does not clearly say."""
    if not text:
        return None
    score = dict.fromkeys(LANGUAGES, 0.0)
    words = _words(text)
    for word in words:
        votes = _WORD_VOTES.get(word)
        if votes is None and "'" in word:
            votes = _ELIDED_VOTES.get(word.split("'", 1)[0])
        for language, share in (votes or {}).items():
            score[language] += share
    for letter in set("".join(words)):
        for language, share in _LETTER_VOTES.get(letter, {}).items():
            score[language] += share
    ranked = sorted(score.items(), key=lambda item: item[1], reverse=True)
    (best, top), (_, runner_up) = ranked[0], ranked[1]
    if top >= 1 and top - runner_up >= LEAD:
        return best
    return None
