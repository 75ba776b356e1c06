"""The DynamoDB benchmark's baseline: a naive port of the reference design's turn.

What the reference design does per inbound message, written the way a straightforward port
would, on a table with the same key schema (pk, sk):

    GetItem    DEDUP#<event id>           seen before? then stop
    PutItem    DEDUP#<event id>           mark it seen
    PutItem    MSG#<time>#user            the person's message
    GetItem    SUMMARY                    the rolling summary
    Query      MSG#, newest first, 60     the recent messages
    Query      FACT#, 30                  the facts
    (model call, store=false)
    PutItem    MSG#<time>#assistant       the reply
    (send)

Reads are eventually consistent (the SDK's default), which halves their capacity. There is no
ledger of progress, so a crash between the user message and the send loses the reply: the
redelivery is skipped as a duplicate. That is the reference's known flaw, kept here on purpose;
only its DynamoDB traffic is compared.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from boto3.dynamodb.conditions import Key

from memagent.providers.whasp import idempotency_key


class ReferenceAgent:
    def __init__(
        self,
        table_name: str,
        *,
        model: Any,  # an openai.OpenAI client
        model_name: str,
        whasp: Any,  # something with send_text(sender=, to=, text=, key=)
        system_prompt: str,
        agent: str = "coach",
        resource: Any | None = None,
    ):
        import boto3

        self.table = (resource or boto3.resource("dynamodb")).Table(table_name)
        self.model = model
        self.model_name = model_name
        self.whasp = whasp
        self.system_prompt = system_prompt
        self.agent = agent

    def pk(self, chat: str) -> str:
        return f"{self.agent}#{chat}"

    def handle(self, event: dict[str, Any]) -> str:
        data = event["data"]
        chat, number, message = data["chat"], data["number"], data["message"]
        pk = self.pk(chat)
        dedupe = {"pk": pk, "sk": f"DEDUP#{event['id']}"}
        if "Item" in self.table.get_item(Key=dedupe):
            return "duplicate"
        expires = int((datetime.now(UTC) + timedelta(days=1)).timestamp())
        self.table.put_item(Item={**dedupe, "expires_at": expires})
        self.remember(pk, "user", message.get("text") or "", message["timestamp"], number)

        summary = self.table.get_item(Key={"pk": pk, "sk": "SUMMARY"}).get("Item")
        recent = self.table.query(
            KeyConditionExpression=Key("pk").eq(pk) & Key("sk").begins_with("MSG#"),
            ScanIndexForward=False,
            Limit=60,
        )["Items"][::-1]
        facts = self.table.query(
            KeyConditionExpression=Key("pk").eq(pk) & Key("sk").begins_with("FACT#"),
            Limit=30,
        )["Items"]

        notes = [self.system_prompt]
        if summary:
            notes.append(f"Summary of the earlier conversation:\n{summary['text']}")
        if facts:
            notes.append(
                "What you know about the user:\n" + "\n".join(f"- {f['text']}" for f in facts)
            )
        reply = self.ask(
            "\n\n".join(notes), [{"role": i["role"], "content": i["text"]} for i in recent]
        )
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        self.remember(pk, "assistant", reply, now, number)
        self.whasp.send_text(
            sender=number, to=chat, text=reply, key=idempotency_key(event["id"], 0)
        )
        return "sent"

    def ask(self, instructions: str, messages: list[dict[str, str]]) -> str:
        response = self.model.responses.create(
            model=self.model_name, instructions=instructions, input=messages, store=False
        )
        return response.output_text.strip()

    def remember(self, pk: str, role: str, text: str, at: str, number: str) -> None:
        self.table.put_item(
            Item={
                "pk": pk,
                "sk": f"MSG#{at}#{time.monotonic_ns()}#{role}",
                "role": role,
                "text": text,
                "at": at,
                "number": number,
            }
        )

    def messages(self, chat: str, role: str) -> list[dict[str, Any]]:
        items = self.table.query(
            KeyConditionExpression=Key("pk").eq(self.pk(chat)) & Key("sk").begins_with("MSG#"),
            ConsistentRead=True,
        )["Items"]
        return [item for item in items if item["role"] == role]

    def seed_memory(self, chat: str, summary: str, facts: list[str]) -> None:
        """Give the reference the same summary and facts as ours (its compaction is not part of
        the turn being measured)."""
        pk = self.pk(chat)
        self.table.put_item(Item={"pk": pk, "sk": "SUMMARY", "text": summary})
        for index, fact in enumerate(facts):
            self.table.put_item(Item={"pk": pk, "sk": f"FACT#{index:04d}", "text": fact})


def on_stand_ins(stack: Any, table_name: str, *, model_retries: int) -> ReferenceAgent:
    """The reference design on the bench's stand-ins (bench/harness.py's Stack)."""
    from harness import SYSTEM_PROMPT
    from openai import OpenAI

    from memagent.providers.whasp import WhaspClient

    return ReferenceAgent(
        table_name,
        model=OpenAI(
            base_url=f"{stack.openai.url}/v1", api_key="sk-bench", max_retries=model_retries
        ),
        model_name="gpt-6-luna",
        whasp=WhaspClient(stack.whasp.url, "whasp-key"),
        system_prompt=SYSTEM_PROMPT,
    )
