"""One turn: an SQS record -> a provider event -> the agent's answer (functions/consumer).

`consumer` handles the batch, retries and backoff; `agent` (Agent.answer) is the turn read top
to bottom, each step in the module its name says: identity, redelivery, remember (inbound),
keywords, bursts, reply (tool_loop), delivery, events. `crew` is what every step is handed.
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.turn.consumer import Consumer
    from memagent.turn.keywords import HANDOFF_PHRASES, OPT_OUT_WORDS, STOP_WORDS, normalised
    from memagent.turn.replies import Replies
    from memagent.turn.settings import DEFAULT_SYSTEM_PROMPT, ConsumerSettings

face(__name__)
