"""The model: the Responses API client (client, always store=false), Amazon Bedrock's
short-term key (bedrock, only with MODEL_PROVIDER=bedrock) and the operator's declared tools
(tools, only with TOOLS_FILE).

Its face: the names the other wings and the functions use, each imported from its module on
first use (memagent.face).
"""

from memagent import face

__getattr__, __all__ = face(
    __name__,
    {
        "bedrock": ["is_bedrock_runtime", "runtime_url"],
        "client": ["Folded", "ModelClient"],
        "settings": [
            "DEFAULT_TRANSCRIPTION_MODEL",
            "MODEL_PROVIDERS",
            "ModelSettings",
            "tools_settings",
        ],
        "tools": ["Caller", "ToolBox", "ToolResult", "load_tools", "tool_hosts"],
    },
)
