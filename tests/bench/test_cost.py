"""bench/cost.py prices the channel: Meta's fee per delivered service message, once per reply
part, and what MaxReplyParts' default costs at most. The arithmetic alone, no benchmark run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devstack.resources import load_template

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # bench/ is scripts run by path, as `make bench` does

import cost  # noqa: E402
import report  # noqa: E402


def _measured(sends: float) -> dict:
    return {"context": {"costing": {"consumer_whasp_calls": sends}}}


@pytest.mark.parametrize(("sends", "fee", "per_1000"), [(1.0, 0.0068, 6.80), (2.5, 0.01, 25.0)])
def test_every_reply_part_pays_one_service_fee(sends, fee, per_1000):
    # given a run whose consumer sent `sends` reply parts per message, and the operator's fee
    assumptions = cost.Assumptions(whatsapp_service_fee=fee)
    # when the channel line is priced
    line = cost.channel_line(_measured(sends), assumptions)
    # then 1,000 messages pay one fee per part sent, in the channel's own subtotal
    assert line.per_message * 1000 == pytest.approx(per_1000)
    assert line.group == "Channel"
    assert f"{sends:.2f} reply parts sent per message x ${fee:g}" in line.formula


def test_the_default_fee_is_the_published_service_rate_with_its_date():
    # given no fee from the operator, then the default is Brazil's service rate from Oct 2026
    assert cost.Assumptions().whatsapp_service_fee == 0.0068
    assert cost.CHANNEL_FEE_EFFECTIVE == "1 October 2026"
    assert "tobachat/whatsapp-api-rates" in cost.CHANNEL_FEE_SOURCE


def test_max_reply_parts_default_is_weighed_against_the_fee():
    # given the template's MaxReplyParts default (3) and a fee of one cent
    template = load_template()
    assumptions = cost.Assumptions(whatsapp_service_fee=0.01)
    # when the cap is priced
    cap = cost.reply_parts_cap(template, assumptions)
    # then a reply at the cap costs three fees, two more than a reply in one part
    assert cap["parts"] == int(template["Parameters"]["MaxReplyParts"]["Default"]) == 3
    assert cap["dollars"] == pytest.approx(0.03)
    assert cap["extra"] == pytest.approx(0.02)
    # and cost.md's channel section says so, with the run's own parts per message
    line = cost.channel_line(_measured(1.0), assumptions)
    text = report.unwrap(report._channel([line], cap))
    assert "one reply costs at most 3 x $0.01 = $0.0300, $0.0200 more" in text
    assert "the consumer sent 1.00 parts per message, $10.00 per 1,000 messages" in text


def test_the_month_table_has_a_channel_subtotal():
    # given a channel line beside an AWS one
    lines = [
        cost.Line("Lambda", 0.001, "-", "-"),
        cost.channel_line(_measured(1.0), cost.Assumptions(whatsapp_service_fee=0.0068)),
    ]
    # when the month table is written, then the channel has its subtotal and counts in the total
    table = report._monthly(lines)
    assert "| **subtotal Channel** | **$6.8000** |" in table
    assert "| **total** | **$7.8000 + $0.00/mo** |" in table
