"""The model: the Responses API client (client, always store=false), Amazon Bedrock's
short-term key (bedrock, only with MODEL_PROVIDER=bedrock) and the operator's declared tools
(tools, only with TOOLS_FILE), OpenAI's speech endpoint (speech, only with VOICE_SPEECH=openai).
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.model.bedrock import is_bedrock_runtime, runtime_url
    from memagent.model.client import Folded, ModelClient
    from memagent.model.settings import DEFAULT_TRANSCRIPTION_MODEL, MODEL_PROVIDERS, ModelSettings
    from memagent.model.settings import tools_settings
    from memagent.model.speech import OPENAI_VOICES, OpenAISpeech
    from memagent.model.tools import Caller, ToolBox, ToolResult, load_tools, offered_choices
    from memagent.model.tools import tool_hosts

face(__name__)
